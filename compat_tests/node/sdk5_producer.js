'use strict';
// node sdk5_producer.js --endpoints H:P --topic T --messages FILE
//   FILE holds one JSON object per line: {"i": n, "body": str, "tag": str, "keys": [str], "props": {k: v}}
//   and optionally "group" (a FIFO message group) or "delayMs" (a timed message), "recall": true (recall the
//   timed message once sent: {"event":"recalled","i":n,"messageId":..} or {"event":"recall_error",..}).
//   Prints {"event":"sent","i":n,"messageId":..,"offset":..,"queueId":..} per message,
//   {"event":"send_error","i":n,"error":..} per failure, then {"event":"done","sent":n,"failed":[i...]};
//   exit 0 only if every message was sent. See sdk5_common.js for the common options.

const fs = require('fs');
const { Producer } = require('rocketmq-client-nodejs');
const { EXIT_FAILED, emit, errorText, clientOptions, run } = require('./sdk5_common');

run([ 'messages' ], async args => {
  const specs = fs.readFileSync(args.messages, 'utf8').split('\n').filter(Boolean).map(line => JSON.parse(line));
  const producer = new Producer({ ...clientOptions(args), topics: [ args.topic ], maxAttempts: 1 });
  await producer.startup();
  const failed = [];
  let sent = 0;
  for (const spec of specs) {
    const message = {
      topic: args.topic,
      body: Buffer.from(spec.body, 'utf8'),
      tag: spec.tag,
      keys: spec.keys || [],
      properties: new Map(Object.entries(spec.props || {})),
    };
    if (spec.group) message.messageGroup = spec.group;
    if (spec.delayMs) message.deliveryTimestamp = new Date(Date.now() + spec.delayMs);
    let receipt;
    try {
      receipt = await producer.send(message);
      sent++;
      emit({ event: 'sent', i: spec.i, messageId: receipt.messageId, offset: receipt.offset,
        queueId: receipt.messageQueue.queueId });
    } catch (err) {
      failed.push(spec.i);
      emit({ event: 'send_error', i: spec.i, error: errorText(err) });
      continue;
    }
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
  await producer.shutdown();
  emit({ event: 'done', sent, failed });
  return failed.length ? EXIT_FAILED : 0;
});
