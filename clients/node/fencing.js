// Fencing: a lease's token checked where the data lives. A token protects nothing until the
// resource refuses a smaller one than the largest it has seen; these helpers make three kinds of
// resource do that, with the token from the guard (`lease.fencingToken`):
//
//   PostgreSQL, with the user's `pg` client, inside the writer's transaction:
//     await db.query('BEGIN');
//     await fencePostgres(db, 'orders', lease.fencingToken); // StaleTokenError if a newer holder wrote
//     await db.query('UPDATE orders SET ...');
//     await db.query('COMMIT');
//
//   Redis as the resource, over any client's raw command function:
//     const fencing = new RedisFencing((args) => redis.sendCommand(args));
//     await fencing.set('fence:{orders}', '{orders}:total', lease.fencingToken, '42');
//
//   Your own gRPC service (@grpc/grpc-js): a server interceptor that refuses calls whose
//   `leased-fencing-token` is below the largest seen for their `leased-lease-name`:
//     const server = new grpc.Server({ interceptors: [fencingInterceptor()] });
//     // the caller: client.put(request, lease.fencingMetadata(), callback)
//
// The SQL and the Redis Functions library these call are the repository's
// fencing/postgres/leased_fencing.sql and fencing/redis/leased_fencing.lua, applied once.
//
// Tokens are 64-bit: leased's are floored at Unix microseconds (about 1.8e15 in 2026), below
// 2^53 until the year 2255, but every helper takes a BigInt (or a decimal string) and sends it as
// decimal text, so that no token is ever rounded through a double.

import grpc from '@grpc/grpc-js';

/** The metadata entry that carries the lease's name, as granted. */
export const LEASE_NAME_METADATA = 'leased-lease-name';
/** The metadata entry that carries the grant's fencing token, in decimal. */
export const FENCING_TOKEN_METADATA = 'leased-fencing-token';
/** The largest token a fenced resource accepts: PostgreSQL's bigint, Redis's integers. */
export const MAX_FENCING_TOKEN = 9223372036854775807n;

const TOKEN_RANGE = `a fencing token from 1 to ${MAX_FENCING_TOKEN}`;

/**
 * A resource refused a token because it has seen a larger one: a newer holder of the lease wrote,
 * so this holder lost the lease. Stop writing with this token; acquire again for a new one.
 */
export class StaleTokenError extends Error {
  /**
   * @param {bigint} token  the refused token
   * @param {bigint | null} mark  the largest token the resource has seen (null if not told)
   * @param {string} resource  the resource key, the Redis mark key, or the lease name
   * @param {{cause?: unknown}} [options]
   */
  constructor(token, mark, resource, options) {
    super(
      `stale fencing token ${token} for ${JSON.stringify(resource)}: the highest seen is ${mark ?? 'unknown'}`,
      options,
    );
    this.name = 'StaleTokenError';
    /** @type {bigint} */ this.token = token;
    /** @type {bigint | null} */ this.mark = mark;
    /** @type {string} */ this.resource = resource;
  }
}

/**
 * Bad input to a fencing helper or a fenced resource: a token outside 1 to 2^63 - 1 (or a Number
 * that may have been rounded), an empty resource key. `argument` names what was wrong; nothing
 * was written.
 */
export class FencingInputError extends Error {
  /** @param {string} argument @param {string} message @param {{cause?: unknown}} [options] */
  constructor(argument, message, options) {
    super(message, options);
    this.name = 'FencingInputError';
    /** @type {string} */ this.argument = argument;
  }
}

/**
 * `value` as a fencing token (a BigInt from 1 to 2^63 - 1), or a FencingInputError naming
 * `argument`. Takes a BigInt, a decimal string (digits only, no sign or leading zero) or a Number
 * that is a safe integer: a Number above 2^53 - 1 may already have been rounded, so it is refused
 * rather than guessed (pass the guard's BigInt, or the token's decimal text).
 *
 * @param {bigint | string | number} value
 * @param {string} [argument]
 * @returns {bigint}
 */
export function toFencingToken(value, argument = 'token') {
  const refuse = (why = '') =>
    new FencingInputError(argument, `${argument} must be ${TOKEN_RANGE}, not ${shown(value)}${why}`);
  let token;
  if (typeof value === 'bigint') {
    token = value;
  } else if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) {
      throw refuse(
        Number.isInteger(value)
          ? ' (a Number above 2^53 - 1 may have been rounded: pass a BigInt or a decimal string)'
          : '',
      );
    }
    token = BigInt(value);
  } else if (typeof value === 'string') {
    if (!/^[1-9][0-9]{0,18}$/.test(value)) throw refuse();
    token = BigInt(value);
  } else {
    throw refuse();
  }
  if (token < 1n || token > MAX_FENCING_TOKEN) throw refuse();
  return token;
}

/** A value as an error message shows it: strings quoted and escaped, cut to 40 characters. */
function shown(value) {
  if (typeof value === 'bigint') return `${value}`;
  if (typeof value !== 'string') return typeof value === 'number' ? String(value) : typeof value;
  const chars = [...value];
  const cut = chars.length > 40 ? '…' : '';
  return `${JSON.stringify(chars.slice(0, 40).join(''))}${cut}`;
}

/** The mark at the end of both adapters' stale messages: "... the highest seen is N". */
function markInStaleMessage(message) {
  const found = /the highest seen is ([0-9]+)\s*$/.exec(message ?? '');
  return found ? BigInt(found[1]) : null;
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL (leased_fencing.sql), with the `pg` package's Client, PoolClient or Pool
// ---------------------------------------------------------------------------------------------

/** leased.fence's and the row trigger's SQLSTATE for a stale token. */
export const POSTGRES_STALE_TOKEN = 'LF001';
/** invalid_parameter_value: bad input to leased.fence or the row trigger. */
const POSTGRES_INVALID_PARAMETER = '22023';

/**
 * Checks `token` against `resource`'s mark and records it, inside the caller's transaction
 * (`SELECT leased.fence($1, $2)`): call it on the client that then writes, after BEGIN, and the
 * check and the write commit or fail together. Until that transaction ends, it holds the mark's
 * row lock, so the fenced transactions of one resource commit one at a time, in token order.
 * Resolves to the mark (now `token`).
 *
 * Rejects with a StaleTokenError (SQLSTATE LF001: a newer holder wrote; the transaction is
 * aborted, roll it back), a FencingInputError (a bad token, before anything is sent, or SQLSTATE
 * 22023 from the server: an empty or over-long resource key), or the driver's error.
 *
 * @param {{query: (text: string, values?: unknown[]) => Promise<{rows: any[]}>}} client
 *   a `pg` Client or PoolClient (a Pool runs each query in a transaction of its own: fine for
 *   a check alone, useless to fence a write)
 * @param {string} resource  the resource key, e.g. the table or the lease's name
 * @param {bigint | string | number} token
 * @returns {Promise<bigint>}
 */
export async function fencePostgres(client, resource, token) {
  const checked = toFencingToken(token);
  if (typeof resource !== 'string') {
    throw new FencingInputError('resource', `resource must be a non-empty string, not ${typeof resource}`);
  }
  let result;
  try {
    // The token travels as decimal text, cast by the server: pg would send a Number as a double.
    result = await client.query('SELECT leased.fence($1, $2::bigint) AS mark', [resource, checked.toString()]);
  } catch (error) {
    throw postgresFencingError(error, resource, checked);
  }
  return BigInt(result.rows[0].mark);
}

/**
 * The fencing error that a `pg` error from leased.fence or the row trigger
 * (leased.fencing_token_guard) stands for: a StaleTokenError for SQLSTATE LF001, a
 * FencingInputError for 22023; any other error is returned as it is. For the row form, catch
 * the INSERT's or UPDATE's error and throw `postgresFencingError(error)`.
 *
 * @param {unknown} error
 * @param {string} [resource]  the resource key, if known (else read from the message)
 * @param {bigint} [token]  the token sent, if known (else read from the message)
 * @returns {unknown}
 */
export function postgresFencingError(error, resource, token) {
  const code = /** @type {any} */ (error)?.code;
  const message = /** @type {any} */ (error)?.message ?? '';
  if (code === POSTGRES_STALE_TOKEN) {
    // "stale fencing token <t> for resource '<r>': ..." or "... for a row of <table>: ..."
    const parsed = /^stale fencing token ([0-9]+) for (?:resource '((?:[^']|'')*)'|(a row of .*?)):/.exec(message);
    const staleToken = token ?? (parsed ? BigInt(parsed[1]) : 0n);
    const key = resource ?? parsed?.[2]?.replaceAll("''", "'") ?? parsed?.[3] ?? '';
    return new StaleTokenError(staleToken, markInStaleMessage(message), key, { cause: error });
  }
  if (code === POSTGRES_INVALID_PARAMETER) {
    // The server's message starts with the argument's name: "token must ...", "resource must ...".
    const argument = /^(\w+) must/.exec(message)?.[1] ?? 'argument';
    return new FencingInputError(argument, message, { cause: error });
  }
  return error;
}

// ---------------------------------------------------------------------------------------------
// Redis as the resource (the leased_fencing Functions library)
// ---------------------------------------------------------------------------------------------

/**
 * Fenced writes to a Redis that holds your data, through the `leased_fencing` Functions library
 * (`redis-cli -x FUNCTION LOAD REPLACE < leased_fencing.lua`, once per Redis). Each call names a
 * mark key (one per resource, e.g. `fence:{orders}`; in a Cluster give it the hash tag of the keys
 * it guards): a token below the mark is refused with a StaleTokenError and nothing is written;
 * otherwise the token becomes the mark and the write is done, in one atomic call.
 *
 * Client-agnostic: it takes the client's raw command function, which sends an array of strings
 * and resolves to the reply (rejecting with the server's error reply):
 *   node-redis: `new RedisFencing((args) => client.sendCommand(args))`
 *   ioredis:    `new RedisFencing((args) => client.call(...args))`
 */
export class RedisFencing {
  #send;

  /** @param {(args: string[]) => Promise<unknown>} sendCommand */
  constructor(sendCommand) {
    if (typeof sendCommand !== 'function') {
      throw new TypeError('RedisFencing takes a function that sends one command: (args) => client.sendCommand(args)');
    }
    this.#send = sendCommand;
  }

  /**
   * Checks `token` against the mark and records it, writing nothing else (FCALL leased_fence).
   * Resolves to the mark, now `token`.
   *
   * @param {string} markKey @param {bigint | string | number} token @returns {Promise<bigint>}
   */
  async fence(markKey, token) {
    const checked = toFencingToken(token);
    const mark = await this.#fcall('leased_fence', [markKey], [checked], markKey, checked);
    return BigInt(String(mark));
  }

  /**
   * SET `key` `value` [options], fenced (FCALL leased_set). Resolves to SET's reply ('OK', or the
   * old value with the GET option, null when NX/XX did not set).
   *
   * @param {string} markKey @param {string} key @param {bigint | string | number} token
   * @param {string} value @param {...string} setOptions  e.g. 'PX', '5000'
   * @returns {Promise<unknown>}
   */
  async set(markKey, key, token, value, ...setOptions) {
    const checked = toFencingToken(token);
    return this.#fcall('leased_set', [markKey, key], [checked, value, ...setOptions], markKey, checked);
  }

  /**
   * HSET `key` with `fields` ({field: value} or [field, value, ...]), fenced (FCALL leased_hset).
   * Resolves to HSET's reply, the number of fields added.
   *
   * @param {string} markKey @param {string} key @param {bigint | string | number} token
   * @param {Record<string, string> | string[]} fields
   * @returns {Promise<number>}
   */
  async hset(markKey, key, token, fields) {
    const checked = toFencingToken(token);
    const pairs = Array.isArray(fields) ? fields : Object.entries(fields).flat();
    if (pairs.length === 0 || pairs.length % 2 !== 0) {
      throw new FencingInputError('fields', 'fields must be one or more field, value pairs');
    }
    return Number(await this.#fcall('leased_hset', [markKey, key], [checked, ...pairs], markKey, checked));
  }

  /**
   * DEL `keys`, fenced (FCALL leased_del). Resolves to DEL's reply, the number of keys removed.
   *
   * @param {string} markKey @param {string[]} keys @param {bigint | string | number} token
   * @returns {Promise<number>}
   */
  async del(markKey, keys, token) {
    const checked = toFencingToken(token);
    if (!Array.isArray(keys) || keys.length === 0) {
      throw new FencingInputError('keys', 'keys must be an array of one or more keys');
    }
    return Number(await this.#fcall('leased_del', [markKey, ...keys], [checked], markKey, checked));
  }

  async #fcall(fn, keys, args, markKey, token) {
    const command = ['FCALL', fn, String(keys.length), ...keys, ...args.map(String)];
    try {
      return await this.#send(command);
    } catch (error) {
      throw redisFencingError(error, markKey, token);
    }
  }
}

/** The fencing error that a Redis error reply from the leased_fencing library stands for. */
function redisFencingError(error, markKey, token) {
  const message = /** @type {any} */ (error)?.message ?? '';
  if (message.startsWith('STALETOKEN ')) {
    return new StaleTokenError(token, markInStaleMessage(message), markKey, { cause: error });
  }
  if (message.startsWith('BADTOKEN ')) {
    return new FencingInputError('token', message.slice('BADTOKEN '.length), { cause: error });
  }
  return error;
}

// ---------------------------------------------------------------------------------------------
// Mark stores for the gRPC middleware: the largest token accepted per lease name
// ---------------------------------------------------------------------------------------------

/**
 * @typedef {object} FenceMarks  Where the middleware keeps its marks.
 * @property {(name: string, token: bigint) => Promise<bigint>} fence  refuses `token` with a
 *   StaleTokenError when a larger one was recorded for `name`, else records it and resolves to
 *   the mark (now `token`); rejects with anything else when the store failed
 */

/**
 * The default mark store: a Map in this process. Only as durable as the process: a restarted
 * service accepts any token until it sees a newer one, and each replica of a service keeps its
 * own marks. Use PostgresMarks or RedisMarks for marks that outlive the process or are shared.
 * One entry per lease name, kept for good (a few dozen bytes each).
 */
export class InProcessMarks {
  /** @type {Map<string, bigint>} */
  #marks = new Map();

  /** @param {string} name @param {bigint} token @returns {Promise<bigint>} */
  async fence(name, token) {
    const mark = this.#marks.get(name);
    if (mark !== undefined && token < mark) throw new StaleTokenError(token, mark, name);
    this.#marks.set(name, token);
    return token;
  }
}

/**
 * Marks in PostgreSQL (leased_fencing.sql applied): `SELECT leased.fence(<keyPrefix><name>,
 * token)` in a transaction of its own. As durable as the database, and shared by every replica of
 * the service that uses it.
 */
export class PostgresMarks {
  #db;
  #keyPrefix;

  /**
   * @param {{query: (text: string, values?: unknown[]) => Promise<{rows: any[]}>}} db  a `pg`
   *   Pool (each query commits on its own)
   * @param {{keyPrefix?: string}} [options]  prepended to the lease name: the resource key
   */
  constructor(db, { keyPrefix = '' } = {}) {
    this.#db = db;
    this.#keyPrefix = keyPrefix;
  }

  /** @param {string} name @param {bigint} token @returns {Promise<bigint>} */
  async fence(name, token) {
    try {
      return await fencePostgres(this.#db, this.#keyPrefix + name, token);
    } catch (error) {
      // The lease name, not the prefixed key, in the caller's message.
      if (error instanceof StaleTokenError) throw new StaleTokenError(error.token, error.mark, name, { cause: error });
      throw error;
    }
  }
}

/**
 * Marks in Redis (the leased_fencing library loaded): `FCALL leased_fence 1 <keyPrefix><name>
 * token`. As durable as that Redis's data, shared by every replica of the service that uses it.
 */
export class RedisMarks {
  #fencing;
  #keyPrefix;

  /**
   * @param {(args: string[]) => Promise<unknown>} sendCommand  as RedisFencing takes it
   * @param {{keyPrefix?: string}} [options]  prepended to the lease name: the mark key
   */
  constructor(sendCommand, { keyPrefix = '' } = {}) {
    this.#fencing = new RedisFencing(sendCommand);
    this.#keyPrefix = keyPrefix;
  }

  /** @param {string} name @param {bigint} token @returns {Promise<bigint>} */
  async fence(name, token) {
    try {
      return await this.#fencing.fence(this.#keyPrefix + name, token);
    } catch (error) {
      if (error instanceof StaleTokenError) throw new StaleTokenError(error.token, error.mark, name, { cause: error });
      throw error;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The gRPC middleware (a @grpc/grpc-js server interceptor)
// ---------------------------------------------------------------------------------------------

/**
 * Per-name locks that run the holders of one name one at a time, in arrival order. A name's entry
 * lives while a call holds or waits for it, so the map never grows with names no longer in use.
 */
class NameLocks {
  /** @type {Map<string, {tail: Promise<void>, users: number}>} */
  #locks = new Map();

  /** Resolves, once `name` is ours, to the function that gives it back (safe to call twice). */
  async lock(name) {
    let entry = this.#locks.get(name);
    if (!entry) {
      entry = { tail: Promise.resolve(), users: 0 };
      this.#locks.set(name, entry);
    }
    entry.users += 1;
    const previous = entry.tail;
    let unlock;
    entry.tail = new Promise((resolve) => (unlock = resolve));
    await previous;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      entry.users -= 1;
      if (entry.users === 0) this.#locks.delete(name);
      unlock();
    };
  }
}

/** Why a call's fencing metadata is refused, as the INVALID_ARGUMENT's details; or the pair. */
function readFencingMetadata(metadata) {
  const names = metadata.get(LEASE_NAME_METADATA);
  const tokens = metadata.get(FENCING_TOKEN_METADATA);
  if (names.length === 0 && tokens.length === 0) return { absent: true };
  if (names.length === 0) {
    return { invalid: `${LEASE_NAME_METADATA} is missing: ${FENCING_TOKEN_METADATA} needs the lease's name beside it` };
  }
  if (tokens.length === 0) {
    return { invalid: `${FENCING_TOKEN_METADATA} is missing: ${LEASE_NAME_METADATA} needs the grant's token beside it` };
  }
  if (names.length > 1 || tokens.length > 1) {
    return { invalid: `${LEASE_NAME_METADATA} and ${FENCING_TOKEN_METADATA} must be sent once each` };
  }
  const name = String(names[0]);
  if (name === '') return { invalid: `${LEASE_NAME_METADATA} must be a lease name, not empty` };
  let token;
  try {
    token = toFencingToken(String(tokens[0]), FENCING_TOKEN_METADATA);
  } catch (error) {
    return { invalid: error.message };
  }
  return { name, token };
}

/**
 * A @grpc/grpc-js server interceptor that makes every method of the server a fenced resource:
 *
 *   const server = new grpc.Server({ interceptors: [fencingInterceptor({ marks })] });
 *
 * Each call must carry `leased-lease-name` and `leased-fencing-token` (the caller passes
 * `lease.fencingMetadata()`). A token below the largest seen for that name is refused with
 * FAILED_PRECONDITION, naming both tokens; otherwise the mark becomes the token (an equal token
 * passes) and the handler runs. Bad metadata (one entry without the other, an empty name, a token
 * that is not 1 to 2^63 - 1 in canonical decimal) is INVALID_ARGUMENT; without either entry, the
 * call is INVALID_ARGUMENT too unless `required` is false, when it passes unchecked. A mark
 * store that fails makes the call UNAVAILABLE, and the handler does not run.
 *
 * Unary calls of one lease name run their handlers one at a time, from the check to the reply,
 * so that a handler's writes for a name land in token order even if the service pauses mid-call.
 * Streaming calls are checked once, when they start; their messages are not ordered.
 *
 * @param {{marks?: FenceMarks, required?: boolean}} [options]  `marks`: an InProcessMarks of
 *   its own by default (only as durable as the process); `required`: true by default
 * @returns {grpc.ServerInterceptor}
 */
export function fencingInterceptor({ marks = new InProcessMarks(), required = true } = {}) {
  const locks = new NameLocks();
  return (methodDescriptor, call) => {
    const unary = !methodDescriptor.requestStream && !methodDescriptor.responseStream;
    let unlock = null;
    let cancelled = false;
    let handlerStarted = false;
    const finish = () => {
      unlock?.();
      unlock = null;
    };
    const refuse = (code, details) => {
      finish();
      call.sendStatus({ code, details, metadata: new grpc.Metadata() });
    };
    return new grpc.ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata(metadata, passOn) {
            const read = readFencingMetadata(metadata);
            if (read.invalid) {
              refuse(grpc.status.INVALID_ARGUMENT, read.invalid);
              return;
            }
            if (read.absent) {
              if (required) {
                refuse(
                  grpc.status.INVALID_ARGUMENT,
                  `this service is fenced: the call needs ${LEASE_NAME_METADATA} and ` +
                    `${FENCING_TOKEN_METADATA} metadata (the lease's name and fencing token: ` +
                    'pass lease.fencingMetadata())',
                );
              } else {
                handlerStarted = true;
                passOn(metadata);
              }
              return;
            }
            checkThenRun(read.name, read.token, metadata, passOn).catch((error) =>
              refuse(grpc.status.INTERNAL, `fencing failed: ${error?.message ?? error}`),
            );
          },
          onCancel() {
            cancelled = true;
            // A handler that started ends with a reply or a status, which unlocks; one that never
            // started never will, so unlock now.
            if (!handlerStarted) finish();
          },
        });
      },
      sendMessage(message, passOn) {
        finish(); // a unary handler's reply: it is done with the name
        passOn(message);
      },
      sendStatus(status, passOn) {
        finish();
        passOn(status);
      },
    });

    async function checkThenRun(name, token, metadata, passOn) {
      if (unary) {
        const release = await locks.lock(name);
        unlock = release;
        if (cancelled) {
          finish();
          return;
        }
      }
      try {
        await marks.fence(name, token);
      } catch (error) {
        if (error instanceof StaleTokenError) {
          refuse(
            grpc.status.FAILED_PRECONDITION,
            `stale fencing token ${token} for lease ${JSON.stringify(name)}: the highest seen is ${error.mark ?? 'unknown'}`,
          );
        } else if (error instanceof FencingInputError) {
          // e.g. a key prefix and name over PostgreSQL's 1024 bytes: the caller's to fix.
          refuse(grpc.status.INVALID_ARGUMENT, `${LEASE_NAME_METADATA}: ${error.message}`);
        } else {
          refuse(grpc.status.UNAVAILABLE, `the fencing mark store failed: ${error?.message ?? error}`);
        }
        return;
      }
      if (cancelled) {
        finish();
        return;
      }
      handlerStarted = true;
      passOn(metadata);
    }
  };
}

/**
 * The fencing metadata of a grant: `leased-lease-name` and `leased-fencing-token`, added to
 * `metadata` (a new grpc.Metadata if none). `Lease.fencingMetadata()` calls it.
 *
 * @param {string} name @param {bigint | string | number} token @param {grpc.Metadata} [metadata]
 * @returns {grpc.Metadata}
 */
export function fencingMetadata(name, token, metadata = new grpc.Metadata()) {
  if (typeof name !== 'string' || name === '') {
    throw new FencingInputError('name', 'name must be a lease name, not empty');
  }
  metadata.set(LEASE_NAME_METADATA, name);
  metadata.set(FENCING_TOKEN_METADATA, toFencingToken(token).toString());
  return metadata;
}
