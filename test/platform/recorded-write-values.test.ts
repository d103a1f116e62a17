import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { auditRowValues } from '../../src/store/audit-repository.js';
import { deliveryValues } from '../../src/store/event-delivery-repository.js';
import { valuesWithRecording } from '../../src/store/recorded-write.js';

// A refresh on PostgreSQL binds its update's values, its audit row's and its outbox row's in one
// statement (src/store/recorded-write.ts). The values are assembled by hand for speed; this
// checks each lands under its own name, and that a write naming a recorded value is refused.

const event = { id: randomUUID(), type: 'session.refreshed', occurredAt: 1_700_000_000_000, actorId: randomUUID(), userId: randomUUID(), organizationId: null, ip: '203.0.113.9', data: { session_id: randomUUID() } };
const delivery = { id: randomUUID(), eventId: event.id, eventType: event.type, organizationId: null, target: 'listener' as const, webhookId: null, nextAttemptAt: 1_700_000_000_500, lease: { until: 1_700_000_030_000, owner: randomUUID() }, now: 1_700_000_000_000 };
const write = { id: randomUUID(), generation: 3, next: 4, now: 1_700_000_000_000, expiresAt: 1_700_086_400_000 };

test('a write and its audit row: every value under its own name, shape "recorded"', () => {
  const { shape, values } = valuesWithRecording(write, { event, delivery: undefined });
  assert.equal(shape, 'recorded');
  assert.deepEqual(values, { ...write, ...auditRowValues(event) });
});

test('a write, its audit row and its outbox row: the outbox values under "delivery."-prefixed names', () => {
  const { shape, values } = valuesWithRecording(write, { event, delivery });
  assert.equal(shape, 'recordedWithDelivery');
  const prefixed = Object.fromEntries(Object.entries(deliveryValues(delivery)).map(([key, value]) => [`delivery.${key}`, value]));
  assert.deepEqual(values, { ...write, ...auditRowValues(event), ...prefixed });
});

test('a write that names a value of its recording is refused, naming it', () => {
  assert.throws(() => valuesWithRecording({ ...write, ip: 'x' }, { event, delivery: undefined }), /both name a value ip/);
  assert.throws(() => valuesWithRecording({ ...write, 'delivery.now': 1 }, { event, delivery }), /both name a value delivery\.now/);
});
