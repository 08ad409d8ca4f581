// Local mode for file deletion: objects are files under `<storageRoot>/<bucket>/<object_key>`.
import { lstat, realpath, rm } from 'node:fs/promises';
import { dirname, isAbsolute, relative, resolve, sep } from 'node:path';
import { fileDeletePayload, type FileDeletePayload, type Provider, type ProviderContext } from '@org/contracts';
import type { FileDeleteResult } from './files-service-delete.js';
import { defaultDataDir, throwIfAborted } from './internal.js';

/** `<repo>/.data/storage`: the default local storage root. */
export const defaultStorageRoot = defaultDataDir('storage');

export interface LocalStorageDeleteOptions {
  /** The folder holding one folder per bucket. Default `<repo>/.data/storage`. */
  storageRoot?: string;
}

const BUCKET = /^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$/;

/**
 * Why `objectKey` may not be used as a path below a bucket folder, or undefined when it
 * may: empty, NUL or other control characters, a backslash, a leading `/` (absolute), or
 * a `.`/`..` segment.
 */
export function unsafeObjectKeyReason(objectKey: string): string | undefined {
  if (objectKey.length === 0) return 'is empty';
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(objectKey)) return 'contains a NUL or control character';
  if (objectKey.includes('\\')) return 'contains a backslash';
  if (objectKey.startsWith('/') || isAbsolute(objectKey)) return 'is an absolute path';
  if (objectKey.split('/').some((s) => s === '..' || s === '.')) return 'has a "." or ".." segment';
  return undefined;
}

/**
 * The `file_delete` provider of local mode: deletes `<storageRoot>/<bucket>/<object_key>`.
 * Keys that could leave the bucket folder are refused with an Error; a missing file is
 * success with `alreadyDeleted: true`.
 */
export function createLocalStorageDeleteProvider(
  options: LocalStorageDeleteOptions = {},
): Provider<FileDeletePayload> & { storageRoot: string } {
  const storageRoot = resolve(options.storageRoot ?? defaultStorageRoot);
  return {
    name: 'local-storage',
    storageRoot,
    payloadSchema: fileDeletePayload,
    requiresBeforeHandler: true,
    async send(payload: FileDeletePayload, context: ProviderContext): Promise<FileDeleteResult> {
      throwIfAborted(context.signal, 'local-storage');
      const { bucket, object_key } = payload;
      if (!BUCKET.test(bucket)) throw new Error(`local-storage: bucket ${JSON.stringify(bucket)} is not a bucket name`);
      const reason = unsafeObjectKeyReason(object_key);
      if (reason) throw new Error(`local-storage: refusing object key ${JSON.stringify(object_key)}: it ${reason}`);
      const bucketDir = resolve(storageRoot, bucket);
      const target = resolve(bucketDir, object_key);
      if (!isInside(bucketDir, target)) {
        throw new Error(
          `local-storage: refusing object key ${JSON.stringify(object_key)}: it escapes the bucket folder`,
        );
      }
      const result = (alreadyDeleted: boolean): FileDeleteResult => ({
        provider: 'local-storage',
        bucket,
        object_key,
        alreadyDeleted,
      });

      // Follow symlinks in the folders: the real parent must still be inside the real bucket folder.
      let realBucket: string;
      let realParent: string;
      try {
        realBucket = await realpath(bucketDir);
        realParent = await realpath(dirname(target));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR')
          return result(true);
        throw err;
      }
      if (realParent !== realBucket && !isInside(realBucket, realParent)) {
        throw new Error(
          `local-storage: refusing object key ${JSON.stringify(object_key)}: its folder leads outside the bucket folder`,
        );
      }
      const file = resolve(realParent, target.slice(dirname(target).length + 1));
      let info;
      try {
        info = await lstat(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR')
          return result(true);
        throw err;
      }
      if (info.isDirectory())
        throw new Error(`local-storage: ${JSON.stringify(object_key)} is a folder, not an object`);
      await rm(file, { force: true });
      return result(false);
    },
  };
}

function isInside(parent: string, child: string): boolean {
  const rel = relative(parent, child);
  return rel !== '' && !rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel);
}
