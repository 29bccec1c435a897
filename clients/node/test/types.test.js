// The TypeScript declarations, checked in this consumer project against the installed package:
// `tsc --noEmit --strict` accepts consumer.ts (the main API as a user writes it), and the values
// that leased-client.d.ts declares are exactly those that the module exports.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import * as leased from 'leased-client';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

test('tsc --strict accepts a consumer, and the declared exports are the runtime exports', async () => {
  // The runtime's export names, as a type; tsc fails on one missing either side, naming it.
  const names = Object.keys(leased).sort();
  writeFileSync(
    here('exports.generated.ts'),
    [
      '// Written by types.test.js: the names that leased-client exports at run time.',
      "import * as leased from 'leased-client';",
      'type Declared = keyof typeof leased;',
      `type Runtime = ${names.map((name) => JSON.stringify(name)).join(' | ')};`,
      "export const notDeclared: [Exclude<Runtime, Declared>] extends [never] ? 'ok' : Exclude<Runtime, Declared> = 'ok';",
      "export const notExported: [Exclude<Declared, Runtime>] extends [never] ? 'ok' : Exclude<Declared, Runtime> = 'ok';",
      '',
    ].join('\n'),
  );
  const tsc = here('node_modules/.bin/tsc');
  const result = await promisify(execFile)(tsc, ['--noEmit', '--strict', '-p', here('tsconfig.json')]).then(
    () => null,
    (error) => error,
  );
  assert.equal(result, null, `tsc failed:\n${result?.stdout}${result?.stderr}`);
  // And the check would see a difference: the runtime has the names the API promises.
  for (const name of ['LeaseClient', 'Lease', 'NotGranted', 'LeaseLostError', 'ReentrantLock', 'ReadWriteLock', 'status']) {
    assert.ok(names.includes(name), name);
  }
});
