// A stand-in for Prisma's native query engine (5.17.0, commit 393aa359…) for
// prisma-client-py 0.15.0, on machines where the native binary cannot be
// downloaded. It serves the native engine's HTTP protocol (GET /status,
// POST / with GraphQL-style queries, /transaction/*) and runs every query on
// Prisma's own WebAssembly engine of the same commit, over node-postgres.
//
// prisma-client-py starts it as `<binary> -p PORT --enable-metrics
// --enable-raw-queries` with PRISMA_DML_PATH (the schema) and
// OVERWRITE_DATASOURCES (the database URL) in the environment.
// TENANTRY_PRISMA_NODE_MODULES (set by the generated launcher) says where
// `npm ci` put the pinned packages: they live outside the source tree.
//
// The WASM engine only speaks Prisma's JSON protocol, so each request is
// translated: GraphQL-style text -> JSON protocol, and typed JSON-protocol
// results ({"$type": "DateTime", "value": …}) back to the plain values the
// GraphQL protocol returned.

import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const ENGINE_COMMIT = '393aa359c9ad4a4bb28630fb5613f9c281cde053'

// ---------------------------------------------------------------------------
// GraphQL-style text (prisma/_builder.py) -> tree.
// The builder renders every scalar with json.dumps, so scalars are JSON
// literals; names, braces, brackets, parentheses and colons are the syntax.

function tokenize(text) {
  const tokens = []
  const re = /\s+|,|([{}()[\]:])|([A-Za-z_][A-Za-z0-9_]*)|("(?:[^"\\]|\\.)*")|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/gy
  let m
  while (re.lastIndex < text.length) {
    const at = re.lastIndex
    if (!(m = re.exec(text))) throw new Error(`cannot parse query at offset ${at}: ${text.slice(at, at + 40)}`)
    if (m[1]) tokens.push({ punct: m[1] })
    else if (m[2]) tokens.push({ name: m[2] })
    else if (m[3]) tokens.push({ value: JSON.parse(m[3]) })
    else if (m[4]) tokens.push({ value: number(m[4]) })
  }
  return tokens
}

// JavaScript numbers lose integers past 2**53: keep those exact, as BigInt.
function number(text) {
  const n = Number(text)
  if (/^-?\d+$/.test(text) && !Number.isSafeInteger(n)) return { $type: 'BigInt', value: text }
  return n
}

class Parser {
  constructor(text) {
    this.tokens = tokenize(text)
    this.i = 0
  }
  peek(punct) {
    const t = this.tokens[this.i]
    return t !== undefined && t.punct === punct
  }
  next() {
    if (this.i >= this.tokens.length) throw new Error('unexpected end of query')
    return this.tokens[this.i++]
  }
  expect(punct) {
    const t = this.next()
    if (t.punct !== punct) throw new Error(`expected '${punct}' in query, got ${JSON.stringify(t)}`)
  }
  name() {
    const t = this.next()
    if (t.name === undefined) throw new Error(`expected a name in query, got ${JSON.stringify(t)}`)
    return t.name
  }
  // `query { result: findUniqueUser (args) { selection } }`
  document() {
    const operation = this.name()
    this.expect('{')
    if (this.name() !== 'result') throw new Error('expected `result:` alias in query')
    this.expect(':')
    const field = this.field()
    this.expect('}')
    return { operation, ...field }
  }
  // name (args)? { selection }?
  field() {
    const name = this.name()
    const args = this.peek('(') ? this.args() : {}
    const selection = this.peek('{') ? this.selection() : null
    return { name, args, selection }
  }
  args() {
    this.expect('(')
    const out = {}
    while (!this.peek(')')) {
      const key = this.key()
      this.expect(':')
      out[key] = this.value()
    }
    this.expect(')')
    return out
  }
  selection() {
    this.expect('{')
    const out = []
    while (!this.peek('}')) out.push(this.field())
    this.expect('}')
    return out
  }
  key() {
    const t = this.next()
    if (t.name !== undefined) return t.name
    if (typeof t.value === 'string') return t.value
    throw new Error(`expected a key in query, got ${JSON.stringify(t)}`)
  }
  value() {
    const t = this.next()
    if (t.punct === '{') {
      const out = {}
      while (!this.peek('}')) {
        const key = this.key()
        this.expect(':')
        out[key] = this.value()
      }
      this.expect('}')
      return out
    }
    if (t.punct === '[') {
      const out = []
      while (!this.peek(']')) out.push(this.value())
      this.expect(']')
      return out
    }
    if (t.name === 'true') return true
    if (t.name === 'false') return false
    if (t.name === 'null') return null
    if ('value' in t) return t.value
    throw new Error(`unexpected token in query: ${JSON.stringify(t)}`)
  }
}

// ---------------------------------------------------------------------------
// The schema, as far as the translation needs it: which fields are relations
// (and to which model) and which are Json.

function readSchema(text) {
  const blocks = [...text.matchAll(/^\s*model\s+(\w+)\s*\{([\s\S]*?)^\s*\}/gm)]
  const names = new Set(blocks.map((b) => b[1]))
  const models = {}
  for (const [, model, body] of blocks) {
    const fields = {}
    for (const line of body.split('\n')) {
      const m = line.match(/^\s*(\w+)\s+(\w+)(\[\])?\??/)
      if (!m) continue
      fields[m[1]] = { type: m[2], relation: names.has(m[2]) ? m[2] : null }
    }
    models[model] = fields
  }
  return models
}

// ---------------------------------------------------------------------------
// Arguments. The JSON protocol treats any non-Json value given for a Json
// input as a JSON *value*: a string would be stored as a JSON string. The
// GraphQL protocol received Json as JSON text, which is what prisma-client-py
// renders, so Json inputs are wrapped as {"$type": "Json", "value": text}.
// Other scalars need nothing: the engine coerces strings to DateTime, BigInt
// and Decimal where the schema expects them.

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && !('$type' in v)
const each = (v, fn) => (Array.isArray(v) ? v.map(fn) : fn(v))
const mapObject = (o, fn) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, fn(k, v)]))

function jsonValue(v) {
  if (v === null || (typeof v === 'object' && v.$type === 'Json')) return v
  return { $type: 'Json', value: typeof v === 'string' ? v : JSON.stringify(v) }
}

// Json filters: equals/not/array_* take JSON; path and string_* do not.
const JSON_OPERANDS = ['equals', 'not', 'array_contains', 'array_starts_with', 'array_ends_with']
function jsonFilter(v) {
  if (!isObject(v)) return jsonValue(v)
  return mapObject(v, (op, x) => (JSON_OPERANDS.includes(op) ? jsonValue(x) : x))
}

class Translator {
  constructor(models) {
    this.models = models
  }
  fields(model) {
    const fields = this.models[model]
    if (!fields) throw new Error(`model ${model} is not in the schema`)
    return fields
  }
  // A filter on `model`: fields, AND/OR/NOT, compound unique keys.
  where(model, v) {
    if (Array.isArray(v)) return v.map((x) => this.where(model, x))
    if (!isObject(v)) return v
    const fields = this.fields(model)
    return mapObject(v, (key, x) => {
      const field = fields[key]
      if (!field) return this.where(model, x) // AND / OR / NOT / a compound unique key
      if (field.relation) return this.relationFilter(field.relation, x)
      if (field.type === 'Json') return jsonFilter(x)
      return x
    })
  }
  relationFilter(model, v) {
    if (!isObject(v)) return v
    const ops = ['is', 'isNot', 'some', 'every', 'none']
    if (Object.keys(v).every((k) => ops.includes(k))) return mapObject(v, (_, x) => this.where(model, x))
    return this.where(model, v) // to-one shorthand
  }
  // Values written to `model` (create/update data).
  data(model, v) {
    if (Array.isArray(v)) return v.map((x) => this.data(model, x))
    if (!isObject(v)) return v
    const fields = this.fields(model)
    return mapObject(v, (key, x) => {
      const field = fields[key]
      if (!field) return x
      if (field.relation) return this.nestedWrite(field.relation, x)
      if (field.type === 'Json') return jsonValue(x)
      return x
    })
  }
  // Nested writes through a relation: {create: …, connect: …, update: …}.
  nestedWrite(model, v) {
    if (!isObject(v)) return v
    const where = (x) => this.where(model, x)
    const data = (x) => this.data(model, x)
    const ops = (x) => each(x, (o) => (isObject(o) ? this.nestedWrite(model, o) : o))
    // `update` is either the data (to-one) or {where, data} (to-many); a Json
    // field called `data` holds text, never an object, so this tells them apart.
    const isWhereData = (o) =>
      isObject(o) && isObject(o.data) && Object.keys(o).every((k) => k === 'where' || k === 'data')
    const updateOf = (x) => each(x, (o) => (isWhereData(o) ? this.nestedWrite(model, o) : data(o)))
    const handlers = {
      where, create: data, data, connect: where, disconnect: where, delete: where, set: where, deleteMany: where,
      connectOrCreate: ops, upsert: ops, updateMany: ops, createMany: ops, update: updateOf,
    }
    return mapObject(v, (key, x) => (handlers[key] ? handlers[key](x) : x))
  }
  args(model, args) {
    if (!model) return args
    return mapObject(args, (key, v) => {
      if (key === 'where' || key === 'cursor' || key === 'having') return this.where(model, v)
      if (key === 'data' || key === 'create' || key === 'update') return this.data(model, v)
      return v // orderBy, by, distinct, take, skip, skipDuplicates
    })
  }
}

// GraphQL selection -> JSON protocol selection. Arguments on an included
// relation (`include={"events": {"where": …, "take": 1}}`) filter the related model.
function selection(translator, model, items) {
  const out = {}
  for (const item of items || []) {
    const related = model ? translator.models[model]?.[item.name]?.relation : null
    const hasArgs = Object.keys(item.args).length > 0
    if (!hasArgs && !item.selection) out[item.name] = true
    else {
      const args = hasArgs ? { arguments: translator.args(related, item.args) } : {}
      out[item.name] = { ...args, selection: selection(translator, related, item.selection) }
    }
  }
  return out
}

const ACTIONS = [
  'findUnique', 'findFirst', 'findMany', 'createOne', 'createMany', 'updateOne', 'updateMany',
  'deleteOne', 'deleteMany', 'upsertOne', 'aggregate', 'groupBy',
]
// `findUniqueLiteLLM_TeamTableOrThrow` -> findUnique, LiteLLM_TeamTable, OrThrow
const ACTION = new RegExp(`^(${ACTIONS.join('|')})(\\w+?)(OrThrow)?$`)

function toJsonQuery(translator, text) {
  const doc = new Parser(text).document()
  if (doc.name === 'queryRaw' || doc.name === 'executeRaw') {
    // `parameters` is JSON text of the array, which is what the engine takes.
    return { action: doc.name, query: { arguments: doc.args, selection: {} } }
  }
  const m = doc.name.match(ACTION)
  if (!m) throw new Error(`unsupported operation ${doc.name}`)
  const [, action, modelName, orThrow] = m
  return {
    modelName,
    action: action + (orThrow || ''),
    query: {
      arguments: translator.args(modelName, doc.args),
      selection: selection(translator, modelName, doc.selection),
    },
  }
}

// ---------------------------------------------------------------------------
// Results. The GraphQL protocol returned DateTime as ISO text, Json as JSON
// text (prisma-client-py parses it), BigInt as a number and Decimal as text.

function plain(v) {
  if (Array.isArray(v)) return v.map(plain)
  if (v === null || typeof v !== 'object') return v
  if (typeof v.$type === 'string' && 'value' in v && Object.keys(v).length === 2) {
    if (v.$type === 'BigInt') {
      const n = Number(v.value)
      return Number.isSafeInteger(n) ? n : v.value
    }
    return v.value
  }
  return mapObject(v, (_, x) => plain(x))
}

// Raw results ({columns, types, rows}) pass unchanged: this engine already
// returns json/jsonb columns parsed and bigint/decimal as text, as the native
// engine did, and a row value is user data that merely might look typed.
function toGraphqlResponse(response, raw) {
  if (!response.data) return response // errors pass through unchanged
  const value = Object.values(response.data)[0]
  return { ...response, data: { result: raw ? value : plain(value) } }
}

// ---------------------------------------------------------------------------
// The engine.

async function loadEngine(modulesDir, datamodel, url, logQueries) {
  const require = createRequire(join(modulesDir, 'noop.js'))
  const pg = require('pg')
  const { PrismaPg } = require('@prisma/adapter-pg')
  const { bindAdapter } = require('@prisma/driver-adapter-utils')
  const wasmDir = join(modulesDir, '@prisma', 'query-engine-wasm', 'postgresql')
  const runtime = await import(pathToFileURL(join(wasmDir, 'query_engine_bg.js')).href)
  const module = new WebAssembly.Module(readFileSync(join(wasmDir, 'query_engine_bg.wasm')))
  const instance = new WebAssembly.Instance(module, { './query_engine_bg.js': runtime })
  runtime.__wbg_set_wasm(instance.exports)

  const { pool, schema } = poolOptions(url)
  readCatalogTypesAsText(PrismaPg, createRequire(require.resolve('@prisma/adapter-pg'))('postgres-array').parse)
  const adapter = bindAdapter(new PrismaPg(new pg.Pool(pool), schema ? { schema } : undefined))
  const log = (line) => {
    let event
    try {
      event = JSON.parse(line)
    } catch {
      event = { level: 'error', message: line }
    }
    if (event.level === 'error' || event.level === 'warn' || (logQueries && event.query)) {
      process.stderr.write(`prisma-bridge: ${line}\n`)
    }
  }
  const engine = new runtime.QueryEngine({ datamodel, logLevel: 'warn', logQueries }, log, adapter)
  await engine.connect('{}')
  return { engine, adapter }
}

// adapter-pg 5.17 rejects a whole raw query when a column has a catalog type
// it does not map (LiteLLM's startup reads ARRAY_AGG(pg_views.viewname), a
// name[]); the native engine read those as text. Retype them before the
// adapter looks: its queries (and its transactions') all go through performIO.
// "char", name, regproc, regclass, regtype, void
const AS_TEXT = new Set([18, 19, 24, 2205, 2206, 2278])
// name[], regclass[], regtype[]
const AS_TEXT_ARRAY = new Set([1003, 2210, 2211])
const TEXT = 25
const TEXT_ARRAY = 1009

function readCatalogTypesAsText(PrismaPg, parseArray) {
  const queryable = Object.getPrototypeOf(PrismaPg.prototype)
  if (queryable.performIO.tenantryPatched) return
  const performIO = queryable.performIO
  queryable.performIO = async function (query) {
    const result = await performIO.call(this, query)
    if (!result.ok) return result
    const { fields, rows } = result.value
    fields.forEach((field, i) => {
      if (AS_TEXT.has(field.dataTypeID)) {
        field.dataTypeID = TEXT
        for (const row of rows) if (row[i] !== null) row[i] = String(row[i])
      } else if (AS_TEXT_ARRAY.has(field.dataTypeID)) {
        field.dataTypeID = TEXT_ARRAY
        for (const row of rows) if (typeof row[i] === 'string') row[i] = parseArray(row[i])
      }
    })
    return result
  }
  queryable.performIO.tenantryPatched = true
}

// Prisma URL parameters that node-postgres does not know become pool settings.
function poolOptions(url) {
  const u = new URL(url)
  const take = (name) => {
    const v = u.searchParams.get(name)
    u.searchParams.delete(name)
    return v
  }
  const seconds = (v) => (v === null || v === '' ? undefined : Number(v) * 1000)
  const limit = take('connection_limit')
  const pool = {
    max: limit ? Number(limit) : 10,
    connectionTimeoutMillis: seconds(take('pool_timeout')) ?? seconds(take('connect_timeout')) ?? 10000,
    idleTimeoutMillis: seconds(take('max_idle_connection_lifetime')) ?? 10000,
  }
  const lifetime = take('max_connection_lifetime')
  if (lifetime) pool.maxLifetimeSeconds = Number(lifetime)
  const prismaOnly = [
    'connect_timeout', 'socket_timeout', 'pgbouncer', 'statement_cache_size', 'sslaccept', 'sslidentity', 'sslpassword',
  ]
  prismaOnly.forEach(take)
  // `schema` is Prisma's search_path; keep any server options the URL carries
  // (LiteLLM puts statement timeouts there).
  const schema = take('schema')
  const options = [take('options'), schema ? `-c search_path="${schema}"` : null].filter(Boolean).join(' ')
  if (options) pool.options = options
  pool.connectionString = u.toString()
  return { pool, schema }
}

// A database that cannot be reached, as node-postgres and Postgres report it
// (refused, reset, timed out, shut down, starting up).
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'EAI_AGAIN',
  '57P01', '57P02', '57P03',
])
const UNREACHABLE_TEXT = /connection terminated|connection ended|connect ECONNREFUSED|timeout exceeded when trying to connect/i

function unreachable(error) {
  return UNREACHABLE_CODES.has(error?.code) || UNREACHABLE_CODES.has(error?.cause?.code) ||
    UNREACHABLE_TEXT.test(String(error?.message ?? error))
}

// The native engine's answer when the database cannot be reached: P1001, "Can't
// reach database server". LiteLLM tells an outage from a row Postgres rejected by
// it, and keeps the spend logs of an outage for the next flush instead of
// dropping them as poison (docs/decisions.md: The Prisma bridge reports an
// unreachable database as the native engine does).
function asUnreachable(e, text) {
  e.user_facing_error.error_code = 'P1001'
  e.user_facing_error.meta = {}
  e.error = e.user_facing_error.message = `Can't reach database server: ${text}`
}

// Errors from node-postgres itself (not Postgres) are parked in the adapter's
// registry and the engine only says "external error N": put the text back.
function withAdapterErrors(response, adapter) {
  for (const e of response.errors || []) {
    const id = e.user_facing_error?.meta?.id
    if (e.user_facing_error?.error_code !== 'P2036' || id === undefined) continue
    const parked = adapter.errorRegistry.consumeError(id)
    delete adapter.errorRegistry.registeredErrors[id] // consumeError does not free it
    if (!parked) continue
    const text = String(parked.error?.message ?? parked.error)
    if (unreachable(parked.error)) asUnreachable(e, text)
    else e.error = e.user_facing_error.message = text
  }
  return response
}

// The WASM engine answers transaction calls with a bare user-facing error;
// prisma-client-py reads errors from {"errors": [...]} as the native one sent.
function txResponse(text) {
  const r = JSON.parse(text)
  if (r && (r.error_code || r.is_panic !== undefined)) return { errors: [{ error: r.message, user_facing_error: r }] }
  return r
}

function errorResponse(err) {
  const message = err && err.message ? err.message : String(err)
  const e = { error: message, user_facing_error: { is_panic: false, message, meta: {}, error_code: null } }
  if (unreachable(err)) asUnreachable(e, message)
  return { errors: [e] }
}

async function main(argv) {
  if (argv.includes('--version') || argv.includes('-V')) {
    process.stdout.write(`query-engine ${ENGINE_COMMIT}\n`)
    return
  }
  const portIndex = Math.max(argv.indexOf('-p'), argv.indexOf('--port'))
  const port = portIndex >= 0 ? Number(argv[portIndex + 1]) : 4466
  const modulesDir = process.env.TENANTRY_PRISMA_NODE_MODULES
  const schemaPath = process.env.PRISMA_DML_PATH
  if (!modulesDir || !schemaPath) throw new Error('TENANTRY_PRISMA_NODE_MODULES and PRISMA_DML_PATH must be set')
  const datamodel = readFileSync(schemaPath, 'utf8')
  const overrides = process.env.OVERWRITE_DATASOURCES ? JSON.parse(process.env.OVERWRITE_DATASOURCES) : []
  const url = overrides[0]?.url || process.env.DATABASE_URL
  if (!url) throw new Error('no database URL: neither OVERWRITE_DATASOURCES nor DATABASE_URL is set')

  const translator = new Translator(readSchema(datamodel))
  const { engine, adapter } = await loadEngine(modulesDir, datamodel, url, Boolean(process.env.LOG_QUERIES))

  // A query the engine refuses as malformed (P2009/P2012) means the
  // translation is wrong, not the data: say so on stderr, where tests look.
  const run = async (request, txId) => {
    const response = withAdapterErrors(JSON.parse(await engine.query(JSON.stringify(request), '{}', txId)), adapter)
    for (const e of response.errors || []) {
      if (['P2009', 'P2012'].includes(e.user_facing_error?.error_code)) {
        process.stderr.write(`prisma-bridge: rejected query: ${e.error}\n${JSON.stringify(request)}\n`)
      }
    }
    return response
  }
  const query = async (body, txId) => {
    if (Array.isArray(body.batch)) {
      const batch = body.batch.map((q) => toJsonQuery(translator, q.query))
      const response = await run({ batch, ...(body.transaction ? { transaction: {} } : {}) }, txId)
      if (response.batchResult) response.batchResult = response.batchResult.map((r) => toGraphqlResponse(r, false))
      return response
    }
    const request = toJsonQuery(translator, body.query)
    return toGraphqlResponse(await run(request, txId), request.action === 'queryRaw')
  }

  const routes = async (req, body) => {
    const path = req.url.split('?')[0]
    if (req.method === 'GET' && path === '/status') return { status: 'ok' }
    if (req.method === 'GET' && path === '/metrics') return { counters: [], gauges: [], histograms: [] }
    if (req.method === 'POST' && path === '/') {
      return query(JSON.parse(body), req.headers['x-transaction-id'] || undefined)
    }
    if (req.method === 'POST' && path === '/transaction/start') {
      return txResponse(await engine.startTransaction(body, '{}'))
    }
    const tx = path.match(/^\/transaction\/([^/]+)\/(commit|rollback)$/)
    if (req.method === 'POST' && tx) {
      const call = tx[2] === 'commit' ? engine.commitTransaction : engine.rollbackTransaction
      return txResponse(await call.call(engine, decodeURIComponent(tx[1]), '{}'))
    }
    return null
  }

  const server = createServer((req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', async () => {
      let result
      try {
        result = await routes(req, Buffer.concat(chunks).toString('utf8'))
      } catch (err) {
        const detail = err && err.stack ? err.stack : err
        process.stderr.write(`prisma-bridge: failed request ${req.method} ${req.url}: ${detail}\n`)
        result = errorResponse(err)
      }
      res.writeHead(result === null ? 404 : 200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(result ?? { error: 'not found' }))
    })
  })
  // prisma-client-py reuses idle connections as long as it likes, as the
  // native engine allowed; Node's 5 s idle timeout would race with reuse, and
  // a long query must not be cut at Node's default 300 s.
  server.keepAliveTimeout = 0
  server.requestTimeout = 0
  // prisma-client-py stops the engine with SIGINT; finish cleanly on either.
  const stop = () => {
    server.close()
    engine.disconnect('{}').finally(() => process.exit(0))
    setTimeout(() => process.exit(0), 2000).unref()
  }
  process.on('SIGINT', stop)
  process.on('SIGTERM', stop)
  // The native engine died with its client; without this a killed LiteLLM
  // would leave the bridge running, reparented.
  const parent = process.ppid
  setInterval(() => process.ppid !== parent && stop(), 1000).unref()
  server.listen(port, '127.0.0.1')
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`prisma-bridge: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
