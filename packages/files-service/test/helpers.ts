import { generateKeyPairSync } from 'node:crypto';
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

export function testConfig(credentials: FilesServiceConfig['credentials'], apiEndpoint: string): FilesServiceConfig {
  return { token: TOKEN, buckets: ['user-uploads', 'other-bucket'], credentials, apiEndpoint };
}
