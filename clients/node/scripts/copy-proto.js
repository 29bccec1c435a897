#!/usr/bin/env node
// Copies the repository's proto (../../proto/lease/v1/lease.proto, the one source of truth) into
// this package's proto/ directory, which the client loads at run time. npm runs it before packing
// (the `prepack` script), so every tarball ships the proto of the commit it was packed from; the
// copy is a build output and stays out of git (.gitignore).

import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const RELATIVE = 'lease/v1/lease.proto';
const from = fileURLToPath(new URL(`../../../proto/${RELATIVE}`, import.meta.url));
const to = fileURLToPath(new URL(`../proto/${RELATIVE}`, import.meta.url));
mkdirSync(dirname(to), { recursive: true });
copyFileSync(from, to);
