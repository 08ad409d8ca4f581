// @org/providers/testing: local fake HTTP servers for Resend, Twilio and GCS. Each starts
// on 127.0.0.1 with a random port and returns `{ url, requests, failNext, reset, close }`
// plus its own state (`emails`, `messages`, or `put`/`has`/`list`). Close them in afterAll.
export type { FakeServer, RecordedRequest } from './http-fake.js';
export { startFakeResend, type FakeResend, type FakeResendEmail, type FakeResendOptions } from './fake-resend.js';
export { startFakeTwilio, type FakeTwilio, type FakeTwilioMessage, type FakeTwilioOptions } from './fake-twilio.js';
export { startFakeGcs, type FakeGcs, type FakeGcsOptions } from './fake-gcs.js';
