'use strict';
// What the sdk5_*.js programs share: argument parsing, JSON-line output, client options, the filter
// expression and how a received message is printed. They drive the RocketMQ 5.x Node.js SDK
// (npm rocketmq-client-nodejs@1.0.8) against a gRPC endpoint (apache.rocketmq.v2.MessagingService)
// for the compat_tests/test_sdk5_*.py tests.
//
// Common options: --endpoints H:P --topic T, [--expression E] [--sql true] (a SQL92 filter instead of a tag
// expression), [--namespace NS], [--access-key AK --secret-key SK], [--tls true|false] (left out: the SDK's
// default), [--timeout S] (exit 3 when it runs out). Client logs go to stderr; stdout carries only JSON lines.

const { format } = require('util');
const { FilterExpression } = require('rocketmq-client-nodejs');
const { FilterType } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const EXIT_FAILED = 1;
const EXIT_USAGE = 2;
const EXIT_TIMEOUT = 3;

function parseArgs(argv, required) {
  const args = {};
  for (let k = 0; k < argv.length; k += 2) {
    if (!argv[k].startsWith('--') || k + 1 >= argv.length) {
      throw new Error(`bad argument: ${argv[k]}`);
    }
    args[argv[k].slice(2)] = argv[k + 1];
  }
  for (const name of [ 'endpoints', 'topic', ...required ]) {
    if (!args[name]) throw new Error(`--${name} is required`);
  }
  return args;
}

function emit(fields) {
  process.stdout.write(JSON.stringify(fields) + '\n');
}

function exitAfterFlush(code) {
  process.stdout.write('', () => process.exit(code));
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

// The SDK wraps the server's answer (a ClientException with its response code) as the `cause` of its own
// errors (e.g. a failed startup): follow the chain.
function errorText(err) {
  const parts = [];
  for (let e = err; e && parts.length < 5; e = e.cause) parts.push(String(e.message || e));
  return parts.join(' | caused by: ') || String(err);
}

const logger = {
  info() {},
  debug() {},
  // The SDK logs printf-style.
  warn(...args) { console.error('[sdk5 warn]', format(...args)); },
  error(...args) { console.error('[sdk5 error]', format(...args)); },
};

function clientOptions(args) {
  const options = {
    endpoints: args.endpoints,
    namespace: args.namespace || '',
    requestTimeout: 5000,
    logger,
  };
  if (args.tls !== undefined) options.sslEnabled = args.tls === 'true';
  if (args['access-key']) {
    options.sessionCredentials = { accessKey: args['access-key'], accessSecret: args['secret-key'] || '' };
  }
  return options;
}

function subscriptions(args) {
  const type = args.sql === 'true' ? FilterType.SQL : FilterType.TAG;
  return new Map([[ args.topic, new FilterExpression(args.expression || '*', type) ]]);
}

function describe(view) {
  return {
    event: 'msg',
    messageId: view.messageId,
    topic: view.topic,
    tag: view.tag || null,
    keys: view.keys,
    props: Object.fromEntries(view.properties),
    body: view.body.toString('utf8'),
    messageGroup: view.messageGroup || null,
    deliveryAttempt: view.deliveryAttempt,
    offset: view.offset,
    bornHost: view.bornHost,
    bornTimestamp: view.bornTimestamp ? view.bornTimestamp.getTime() : null,
    deliveryTimestamp: view.deliveryTimestamp ? view.deliveryTimestamp.getTime() : null,
    corrupted: Boolean(view.corrupted),
    receiptHandle: view.receiptHandle,
  };
}

// Runs body(args) with parsed arguments under --timeout; usage errors exit 2 with one line.
function run(required, body) {
  let args;
  try {
    args = parseArgs(process.argv.slice(2), required);
  } catch (err) {
    console.error(errorText(err));
    process.exit(EXIT_USAGE);
  }
  // Not unref()'d: the process ends through exitAfterFlush(), or here.
  setTimeout(() => {
    emit({ event: 'timeout' });
    exitAfterFlush(EXIT_TIMEOUT);
  }, Number(args.timeout || 60) * 1000);
  body(args).then(code => exitAfterFlush(code), err => {
    emit({ event: 'error', error: errorText(err) });
    console.error(err);
    exitAfterFlush(EXIT_FAILED);
  });
}

module.exports = { EXIT_FAILED, emit, sleep, errorText, clientOptions, subscriptions, describe, run };
