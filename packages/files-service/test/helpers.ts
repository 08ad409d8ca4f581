import { generateKeyPairSync } from 'node:crypto';
import type { TestDatabase } from '@org/testing';
import type { FilesServiceConfig } from '@org/files-service';

/** A throwaway service account (a fresh RSA key) and its public key for the fake GCS. */
export function testServiceAccount() {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    credentials: {
      client_email: 'files-service@test-project.iam.gserviceaccount.com',
      private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
      project_id: 'test-project',
    },
    publicKey,
  };
}

export const TOKEN = 'files-service-test-token-0123456789';

export function testConfig(
  credentials: FilesServiceConfig['credentials'],
  apiEndpoint: string,
  databaseUrl: string,
): FilesServiceConfig {
  return { token: TOKEN, buckets: ['user-uploads', 'other-bucket'], credentials, apiEndpoint, databaseUrl };
}

/** A claimed file_delete task: the attempt a worker is performing. */
export interface HeldAttempt {
  objectKey: string;
  fileId: string;
  taskId: string;
  taskLeaseId: string;
}

/**
 * Puts the deletion of each object in a worker's hands, as the system would: a file row,
 * the app's kickoff, one supervisor run (as the worker) that puts a file_delete attempt
 * in flight, and the worker's claim of that attempt's task with a lease of
 * `leaseSeconds` (default 300). The files service signs only for such objects, for no
 * longer than the lease has left.
 */
export async function scheduleDeletions(
  db: TestDatabase,
  bucket: string,
  objectKeys: string[],
  leaseSeconds = 300,
): Promise<HeldAttempt[]> {
  const { rows } = await db.query(
    `insert into accounts.account (email) values ('files@example.com') returning account_id`,
  );
  const held: HeldAttempt[] = [];
  for (const key of objectKeys) {
    const file = await db.query(
      'insert into files.file (account_id, bucket, object_key) values ($1, $2, $3) returning file_id::text',
      [rows[0].account_id, bucket, key],
    );
    const fileId = file.rows[0].file_id as string;
    const kick = await db
      .pool('app')
      .query('select file_deletion_task_id from files.kickoff_file_deletion($1)', [fileId]);
    await db
      .pool('worker')
      .query(
        `select internal.run_function('files.file_deletion_supervisor', jsonb_build_object('file_deletion_task_id', $1::bigint))`,
        [kick.rows[0].file_deletion_task_id],
      );
    const claimed = await db
      .pool('worker')
      .query<{ task_id: string; task_lease_id: string; payload: { file_id: number } }>(
        `select task_id::text, task_lease_id::text, payload from queues.claim_tasks('files-test-worker', 100, array['file_delete'], $1)`,
        [leaseSeconds],
      );
    const task = claimed.rows.find((t) => String(t.payload.file_id) === fileId);
    if (!task) throw new Error(`the file_delete task of file ${fileId} was not claimed`);
    held.push({ objectKey: key, fileId, taskId: task.task_id, taskLeaseId: task.task_lease_id });
  }
  return held;
}
