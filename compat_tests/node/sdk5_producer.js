'use strict';
// node sdk5_producer.js --endpoints H:P --topic T --messages FILE
//   FILE holds one JSON object per line: {"i": n, "body": str, "tag": str, "keys": [str], "props": {k: v}}
//   and optionally "group" (a FIFO message group) or "delayMs" (a timed message), "recall": true (recall the
//   timed message once sent: {"event":"recalled","i":n,"messageId":..} or {"event":"recall_error",..}).
//   [--concurrent true]: every send in flight at once (the SDK's promises awaited together), else one by one.
//   [--transaction commit|rollback|orphan]: each message in a transaction of its own, then committed, rolled
//   back or left open; the transaction checker answers the server's check-back with --check COMMIT|ROLLBACK
//   and prints {"event":"checked","messageId":..,"body":..}; then it waits up to --wait S (30 for "orphan",
//   else 0) until every message was checked (a committed or rolled back one should never be).
//   Prints {"event":"sent","i":n,"messageId":..,"transactionId":..,"offset":..,"queueId":..} per message,
//   {"event":"send_error","i":n,"error":..} per failure, then {"event":"done","sent":n,"failed":[i...]};
//   exit 0 only if every message was sent. See sdk5_common.js for the common options.

const fs = require('fs');
const { Producer } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');
const { EXIT_FAILED, emit, sleep, errorText, clientOptions, run } = require('./sdk5_common');

// How long the checker's answer (an EndTransaction sent after check() returns) is given before shutdown.
const END_TRANSACTION_GRACE_MS = 1000;

function toMessage(topic, spec) {
  const message = {
    topic,
    body: Buffer.from(spec.body, 'utf8'),
    tag: spec.tag,
    keys: spec.keys || [],
    properties: new Map(Object.entries(spec.props || {})),
  };
  if (spec.group) message.messageGroup = spec.group;
  if (spec.delayMs) message.deliveryTimestamp = new Date(Date.now() + spec.delayMs);
  return message;
}

// A checker that resolves `everyChecked` once `expect` distinct messages were asked about.
function transactionChecker(resolution, expect) {
  const asked = new Set();
  let allAsked;
  const everyChecked = new Promise(resolve => { allAsked = resolve; });
  const checker = {
    async check(view) {
      emit({ event: 'checked', messageId: view.messageId, body: view.body.toString('utf8') });
      asked.add(view.messageId);
      if (asked.size >= expect) allAsked();
      return resolution === 'COMMIT' ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
    },
  };
  return { checker, everyChecked };
}

async function settle(promise) {
  try {
    return { status: 'fulfilled', value: await promise };
  } catch (reason) {
    return { status: 'rejected', reason };
  }
}

run([ 'messages' ], async args => {
  const specs = fs.readFileSync(args.messages, 'utf8').split('\n').filter(Boolean).map(line => JSON.parse(line));
  const options = { ...clientOptions(args), topics: [ args.topic ], maxAttempts: 1 };
  const tx = args.transaction && transactionChecker(args.check, specs.length);
  if (tx) options.checker = tx.checker;
  const producer = new Producer(options);
  await producer.startup();

  const send = async spec => {
    const message = toMessage(args.topic, spec);
    if (!tx) return producer.send(message);
    const transaction = producer.beginTransaction();
    const receipt = await producer.send(message, transaction);
    if (args.transaction === 'commit') await transaction.commit();
    else if (args.transaction === 'rollback') await transaction.rollback();
    return receipt;
  };
  let outcomes;
  if (args.concurrent === 'true') {
    outcomes = await Promise.allSettled(specs.map(send));
  } else {
    outcomes = [];
    for (const spec of specs) outcomes.push(await settle(send(spec)));
  }

  const failed = [];
  let sent = 0;
  for (const [ k, spec ] of specs.entries()) {
    const outcome = outcomes[k];
    if (outcome.status !== 'fulfilled') {
      failed.push(spec.i);
      emit({ event: 'send_error', i: spec.i, error: errorText(outcome.reason) });
      continue;
    }
    const receipt = outcome.value;
    sent++;
    emit({ event: 'sent', i: spec.i, messageId: receipt.messageId, transactionId: receipt.transactionId || null,
      offset: receipt.offset, queueId: receipt.messageQueue.queueId });
    if (spec.recall) {
      try {
        const recalled = await producer.recallMessage(args.topic, receipt.recallHandle);
        emit({ event: 'recalled', i: spec.i, messageId: recalled.messageId });
      } catch (err) {
        failed.push(spec.i);
        emit({ event: 'recall_error', i: spec.i, error: errorText(err) });
      }
    }
  }
  const wait = Number(args.wait || (args.transaction === 'orphan' ? 30 : 0));
  if (tx && sent && wait) {
    await Promise.race([ tx.everyChecked, sleep(wait * 1000) ]);
    await sleep(END_TRANSACTION_GRACE_MS);
  }
  await producer.shutdown();
  emit({ event: 'done', sent, failed });
  return failed.length ? EXIT_FAILED : 0;
});
