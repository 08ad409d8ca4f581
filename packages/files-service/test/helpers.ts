import { generateKeyPairSync } from 'node:crypto';
import type { TestDatabase } from '@org/db-tools/testing';
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

/**
 * Schedules the deletion of each object as the system would: a file row, the app's
 * kickoff, and one supervisor run (as the worker) that puts a file_delete attempt in
 * flight. The files service signs only for such objects.
 */
export async function scheduleDeletions(db: TestDatabase, bucket: string, objectKeys: string[]): Promise<void> {
  const { rows } = await db.query(
    `insert into accounts.account (email) values ('files@example.com') returning account_id`,
  );
  for (const key of objectKeys) {
    const file = await db.query(
      'insert into files.file (account_id, bucket, object_key) values ($1, $2, $3) returning file_id',
      [rows[0].account_id, bucket, key],
    );
    const kick = await db
      .pool('app')
      .query('select file_deletion_task_id from files.kickoff_file_deletion($1)', [file.rows[0].file_id]);
    await db
      .pool('worker')
      .query(
        `select internal.run_function('files.file_deletion_supervisor', jsonb_build_object('file_deletion_task_id', $1::bigint))`,
        [kick.rows[0].file_deletion_task_id],
      );
  }
}
