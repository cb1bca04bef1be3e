// Purpose-made edits of the released contract and what the compatibility check says
// about each: the evolution rules, executed. Run by scripts/contract-check.sh
// (node --test, with NODE_PATH set to the pinned packages).
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const yaml = require('js-yaml');
const { compare } = require('./contract.cjs');

const RELEASED = fs.readFileSync(path.resolve(__dirname, '../released/asyncapi-v1.yaml'), 'utf8');

// The released document with `edit` applied to its components.schemas.
async function check(edit) {
  const doc = yaml.load(RELEASED);
  edit(doc.components.schemas.BookingExpiredPayload, doc);
  return compare(RELEASED, yaml.dump(doc, { lineWidth: -1 }));
}

const paths = (changes) => changes.map((c) => `${c.action} ${c.path}`);

test('the released contract compared with itself has no changes', async () => {
  const r = await compare(RELEASED, RELEASED);
  assert.deepEqual([r.breaking, r.nonBreaking, r.unclassified], [[], [], []]);
});

test('moving the document to another AsyncAPI minor version is compatible', async () => {
  const r = await check((_, doc) => {
    doc.asyncapi = '3.1.0';
  });
  assert.deepEqual([paths(r.breaking), paths(r.nonBreaking), r.unclassified], [[], ['edit /asyncapi'], []]);
});

test('removing a field is breaking', async () => {
  const r = await check((p) => {
    delete p.properties.DealId;
    p.required = p.required.filter((f) => f !== 'DealId');
  });
  assert.ok(paths(r.breaking).includes('remove /components/schemas/BookingExpiredPayload/properties/DealId'), paths(r.breaking).join('\n'));
  assert.deepEqual(r.unclassified, []);
});

test('renaming a field is breaking', async () => {
  const r = await check((p) => {
    p.properties.ExpiresAt = p.properties.ExpiredAt;
    delete p.properties.ExpiredAt;
    p.required = p.required.map((f) => (f === 'ExpiredAt' ? 'ExpiresAt' : f));
  });
  const breaking = paths(r.breaking);
  assert.ok(breaking.includes('remove /components/schemas/BookingExpiredPayload/properties/ExpiredAt'), breaking.join('\n'));
  assert.ok(breaking.some((p) => p.startsWith('edit /components/schemas/BookingExpiredPayload/required/')), breaking.join('\n'));
});

test('changing a field type is breaking', async () => {
  const r = await check((p) => {
    p.properties.ExpiredAt = { type: 'integer', description: 'Unix seconds' };
  });
  assert.ok(paths(r.breaking).some((p) => p.includes('/properties/ExpiredAt/')), paths(r.breaking).join('\n'));
});

test('a new required field is breaking', async () => {
  const r = await check((p) => {
    p.properties.Reason = { type: 'string' };
    p.required.push('Reason');
  });
  assert.ok(paths(r.breaking).includes('add /components/schemas/BookingExpiredPayload/required/6'), paths(r.breaking).join('\n'));
});

test('removing a Phase value is breaking', async () => {
  const r = await check((p) => {
    p.properties.Phase.enum = ['Reserve'];
  });
  assert.ok(paths(r.breaking).includes('remove /components/schemas/BookingExpiredPayload/properties/Phase/enum/1'), paths(r.breaking).join('\n'));
});

test('changing the topic is breaking', async () => {
  const r = await check((_, doc) => {
    doc.channels.bookingExpiredV1.address = 'pin.crm.booking-expired.v2';
  });
  assert.ok(paths(r.breaking).includes('edit /channels/bookingExpiredV1/address'), paths(r.breaking).join('\n'));
});

test('changing the partition count is breaking', async () => {
  const r = await check((_, doc) => {
    doc.channels.bookingExpiredV1['x-partitioning'].partitions = 12;
  });
  assert.ok(paths(r.breaking).includes('edit /channels/bookingExpiredV1/x-partitioning/partitions'), paths(r.breaking).join('\n'));
});

test('a new optional field is compatible', async () => {
  const r = await check((p) => {
    p.properties.Reason = { type: 'string', description: 'Why it expired.' };
  });
  assert.deepEqual([r.breaking, r.unclassified], [[], []]);
  assert.ok(paths(r.nonBreaking).includes('add /components/schemas/BookingExpiredPayload/properties/Reason'), paths(r.nonBreaking).join('\n'));
});

test('a new Phase value is compatible', async () => {
  const r = await check((p) => {
    p.properties.Phase.enum.push('Hold');
  });
  assert.deepEqual([r.breaking, r.unclassified], [[], []]);
  assert.ok(paths(r.nonBreaking).includes('add /components/schemas/BookingExpiredPayload/properties/Phase/enum/2'), paths(r.nonBreaking).join('\n'));
});

test('rewording a description is compatible', async () => {
  const r = await check((p) => {
    p.properties.DealId.description = 'The deal.';
  });
  assert.deepEqual([r.breaking, r.unclassified], [[], []]);
  assert.ok(r.nonBreaking.length > 0);
});

test('version 2 is a breaking change of version 1: it needed its own topic', async () => {
  const v2 = fs.readFileSync(path.resolve(__dirname, '../asyncapi-v2.yaml'), 'utf8');
  const r = await compare(RELEASED, v2);
  const breaking = paths(r.breaking);
  assert.ok(breaking.includes('remove /components/schemas/BookingExpiredPayload/properties/TenantId'), breaking.join('\n'));
  assert.ok(breaking.includes('edit /components/schemas/BookingExpiredPayload/required/1'), breaking.join('\n'));
});
