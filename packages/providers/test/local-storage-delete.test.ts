import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocalStorageDeleteProvider, defaultStorageRoot } from '@org/providers';
import { ctx } from './helpers.ts';

let root: string;
let outside: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'storage-'));
  outside = await mkdtemp(join(tmpdir(), 'outside-'));
  await mkdir(join(root, 'my-bucket', 'users', '7'), { recursive: true });
  await writeFile(join(root, 'my-bucket', 'users', '7', 'a.wav'), 'audio');
  await writeFile(join(root, 'secret.txt'), 'not in a bucket');
  await writeFile(join(outside, 'victim.txt'), 'keep me');
  await symlink(outside, join(root, 'my-bucket', 'escape'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

const payload = (object_key: string, bucket = 'my-bucket') => ({ file_id: 1, bucket, object_key });

describe('local storage delete', () => {
  it('deletes <root>/<bucket>/<key>, then reports alreadyDeleted', async () => {
    const provider = createLocalStorageDeleteProvider({ storageRoot: root });
    expect(provider.name).toBe('local-storage');
    expect(await provider.send(payload('users/7/a.wav'), ctx())).toEqual({
      provider: 'local-storage',
      bucket: 'my-bucket',
      object_key: 'users/7/a.wav',
      alreadyDeleted: false,
    });
    await expect(stat(join(root, 'my-bucket', 'users', '7', 'a.wav'))).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await provider.send(payload('users/7/a.wav'), ctx())).toMatchObject({ alreadyDeleted: true });
    expect(await provider.send(payload('never/there.txt'), ctx())).toMatchObject({ alreadyDeleted: true });
    expect(await provider.send(payload('x', 'no-such-bucket'), ctx())).toMatchObject({ alreadyDeleted: true });
  });

  it.each([
    ['../x', /"\.\.\/x": it has a "\." or "\.\." segment/],
    ['/etc/passwd', /"\/etc\/passwd": it is an absolute path/],
    ['a/../../b', /"a\/\.\.\/\.\.\/b": it has a "\." or "\.\." segment/],
    ['../secret.txt', /segment/],
    ['a/./b', /segment/],
    ['a\u0000b', /NUL or control character/],
    ['a\\..\\b', /backslash/],
    ['', /is empty/],
  ])('refuses the key %j', async (key, message) => {
    const provider = createLocalStorageDeleteProvider({ storageRoot: root });
    await expect(provider.send(payload(key), ctx())).rejects.toThrow(message);
    expect(await readFile(join(root, 'secret.txt'), 'utf8')).toBe('not in a bucket');
  });

  it('refuses a key whose folder is a symlink leading out of the bucket', async () => {
    const provider = createLocalStorageDeleteProvider({ storageRoot: root });
    await expect(provider.send(payload('escape/victim.txt'), ctx())).rejects.toThrow(/leads outside the bucket folder/);
    expect(await readFile(join(outside, 'victim.txt'), 'utf8')).toBe('keep me');
  });

  it('refuses a bad bucket name', async () => {
    const provider = createLocalStorageDeleteProvider({ storageRoot: root });
    await expect(provider.send(payload('x', '..'), ctx())).rejects.toThrow(/bucket "\.\." is not a bucket name/);
  });

  it('defaults to <repo>/.data/storage', () => {
    expect(defaultStorageRoot).toMatch(/\/\.data\/storage$/);
    expect(createLocalStorageDeleteProvider().storageRoot).toBe(defaultStorageRoot);
  });
});
