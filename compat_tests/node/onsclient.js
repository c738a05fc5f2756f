'use strict';
// Drive ali-ons (npm ali-ons@3.12.0) against a RocketMQ NameServer, for compat_tests/test_ali_ons.py.
//
//   node onsclient.js produce --namesrv H:P --topic T --group G --messages FILE [--timeout S]
//     FILE holds one JSON object per line: {"i": n, "body": str, "tags": str, "keys": [str], "props": {k: v}}
//     and optionally "delay": a delay level (msg.delayTimeLevel).
//     Prints {"event":"sent","i":n,"msgId":..,"queueId":..,"queueOffset":..} per acknowledged message,
//     {"event":"send_error",...} per failed attempt, then {"event":"done","sent":n,"failed":[i...]};
//     exit 0 only if every message was acknowledged with SEND_OK.
//   node onsclient.js consume --namesrv H:P --topic T --group G --expect N [--linger S] [--timeout S]
//       [--props a,b] [--expression '*'] [--fail-times K] [--sql EXPR] [--broadcast true]
//     --sql subscribes with {expressionType: 'SQL92', subString: EXPR}; --broadcast makes it BROADCASTING.
//     Prints {"event":"ready"}, one {"event":"msg",...} per delivery, then {"event":"done","received":n}
//     With --fail-times K the handler throws for messages delivered fewer than K times before
//     (reconsumeTimes < K), printing {"event":"failed",...}; the client then sends them back for a retry.
//     after N deliveries and --linger seconds without another one (the offsets are persisted to the broker
//     by close()); exit 3 on timeout.
//   Both take [--access-key AK --secret-key SK] to sign their requests (a broker with aclEnable=true).
// Client logs go to stderr; stdout carries only JSON lines.

const fs = require('fs');
const httpclient = require('urllib');
const { Producer, Consumer, Message } = require('ali-ons');

const EXIT_TIMEOUT = 3;

function parseArgs(argv) {
  const [command, ...rest] = argv;
  const args = { command };
  for (let k = 0; k < rest.length; k += 2) {
    if (!rest[k].startsWith('--') || k + 1 >= rest.length) {
      throw new Error(`bad argument: ${rest[k]}`);
    }
    args[rest[k].slice(2)] = rest[k + 1];
  }
  for (const required of [ 'namesrv', 'topic', 'group' ]) {
    if (!args[required]) throw new Error(`--${required} is required`);
  }
  return args;
}

function emit(fields) {
  process.stdout.write(JSON.stringify(fields) + '\n');
}

const logger = {
  info() {},
  debug() {},
  warn(...args) { console.error('[ali-ons warn]', ...args); },
  error(...args) { console.error('[ali-ons error]', ...args); },
};

function clientOptions(args) {
  return {
    httpclient,
    logger,
    nameSrv: args.namesrv,
    // ACL: ali-ons signs every request when both are given.
    accessKeyId: args['access-key'] || '',
    accessKeySecret: args['secret-key'] || '',
    persistent: false,
  };
}

function exitAfterFlush(code) {
  process.stdout.write('', () => process.exit(code));
}

function armTimeout(args, what) {
  const seconds = Number(args.timeout || 60);
  // Not unref()'d: the process ends through exitAfterFlush(), or here.
  setTimeout(() => {
    emit({ event: 'timeout', what });
    exitAfterFlush(EXIT_TIMEOUT);
  }, seconds * 1000);
}

async function produce(args) {
  armTimeout(args, 'produce');
  const specs = fs.readFileSync(args.messages, 'utf8').split('\n').filter(Boolean).map(line => JSON.parse(line));
  const retries = Number(args.retries || 3);
  const producer = new Producer({ ...clientOptions(args), producerGroup: args.group });
  producer.on('error', err => logger.error(err));
  await producer.ready();
  let sent = 0;
  const failed = [];
  for (const spec of specs) {
    let ok = false;
    for (let attempt = 0; attempt <= retries && !ok; attempt++) {
      const msg = new Message(args.topic, spec.tags, Buffer.from(spec.body, 'utf8'));
      if (spec.keys) msg.keys = spec.keys;
      if (spec.delay) msg.delayTimeLevel = spec.delay;
      for (const [ name, value ] of Object.entries(spec.props || {})) {
        msg.properties[name] = value;
      }
      try {
        const result = await producer.send(msg);
        if (result.sendStatus !== 'SEND_OK') throw new Error(`sendStatus ${result.sendStatus}`);
        ok = true;
        sent++;
        emit({
          event: 'sent', i: spec.i, msgId: result.msgId,
          queueId: result.messageQueue && result.messageQueue.queueId, queueOffset: result.queueOffset,
        });
      } catch (err) {
        emit({ event: 'send_error', i: spec.i, attempt, error: String(err && err.message).slice(0, 300) });
        await new Promise(resolve => setTimeout(resolve, 200));
      }
    }
    if (!ok) failed.push(spec.i);
  }
  await producer.close();
  emit({ event: 'done', sent, failed });
  exitAfterFlush(failed.length === 0 && sent === specs.length ? 0 : 1);
}

async function consume(args) {
  armTimeout(args, 'consume');
  const expect = Number(args.expect);
  const lingerMs = Number(args.linger || 2) * 1000;
  const propNames = (args.props || '').split(',').filter(Boolean);
  const failTimes = Number(args['fail-times'] || 0);
  const consumer = new Consumer({
    ...clientOptions(args), consumerGroup: args.group, isBroadcast: args.broadcast === 'true',
  });
  consumer.on('error', err => logger.error(err));
  let received = 0;
  let last = Date.now();
  const expression = args.sql ? { expressionType: 'SQL92', subString: args.sql } : args.expression || '*';
  consumer.subscribe(args.topic, expression, async msg => {
    const props = {};
    for (const name of propNames) props[name] = msg.properties[name] === undefined ? null : msg.properties[name];
    const record = {
      topic: msg.topic, body: msg.body.toString('utf8'), tags: msg.tags, keys: msg.keys, props,
      msgId: msg.msgId, queueId: msg.queueId, queueOffset: msg.queueOffset, reconsumeTimes: msg.reconsumeTimes,
      bornTimestamp: Number(msg.bornTimestamp), storeTimestamp: Number(msg.storeTimestamp),
    };
    if (msg.reconsumeTimes < failTimes) {
      emit({ event: 'failed', ...record });
      throw new Error('consume later');
    }
    received++;
    last = Date.now();
    emit({ event: 'msg', ...record });
  });
  await consumer.ready();
  emit({ event: 'ready' });
  while (!(received >= expect && Date.now() - last >= lingerMs)) {
    await new Promise(resolve => setTimeout(resolve, 50));
  }
  await consumer.close();
  emit({ event: 'done', received });
  exitAfterFlush(0);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (args.command === 'produce') return produce(args);
  if (args.command === 'consume') return consume(args);
  throw new Error(`unknown command ${args.command}: use produce or consume`);
}

main().catch(err => {
  console.error(err && err.stack || err);
  emit({ event: 'fatal', error: String(err && err.message) });
  exitAfterFlush(2);
});
