'use strict';
// node sdk5_simple_consumer.js --endpoints H:P --topic T --group G [--acks N] [--deliveries D]
//     [--nack-times K] [--change-invisible MS] [--invisible MS] [--batch B] [--await MS] [--linger S]
//   A SimpleConsumer receiving in a loop. A message delivered for the K-th time or less (--nack-times K,
//   0 by default) is not acked: it comes back after its invisible duration (--invisible, 15000 ms by
//   default), or with --change-invisible MS its invisible duration is changed to MS, printing
//   {"event":"changed","messageId","before","after"} (the receipt handles). Other messages are acked,
//   printing {"event":"acked","messageId"}. It stops after N acks or D deliveries, keeps receiving for
//   --linger seconds more (to catch unwanted redeliveries), then prints {"event":"done","acks","deliveries"}.
//   Every delivery prints a "msg" event (sdk5_common.describe); failed calls print receive_error or
//   settle_error. See sdk5_common.js for the common options.

const { SimpleConsumer } = require('rocketmq-client-nodejs');
const { emit, sleep, errorText, clientOptions, subscriptions, describe, run } = require('./sdk5_common');

run([ 'group' ], async args => {
  const wantAcks = Number(args.acks || Infinity);
  const wantDeliveries = Number(args.deliveries || Infinity);
  const nackTimes = Number(args['nack-times'] || 0);
  const changeTo = args['change-invisible'] === undefined ? null : Number(args['change-invisible']);
  const invisible = Number(args.invisible || 15000);
  const batch = Number(args.batch || 16);
  const consumer = new SimpleConsumer({
    ...clientOptions(args),
    consumerGroup: args.group,
    subscriptions: subscriptions(args),
    awaitDuration: Number(args.await || 2000),
  });
  await consumer.startup();
  emit({ event: 'ready' });
  let acks = 0;
  let deliveries = 0;
  let lingerUntil = null;
  for (;;) {
    if (lingerUntil === null && (acks >= wantAcks || deliveries >= wantDeliveries)) {
      lingerUntil = Date.now() + Number(args.linger || 0) * 1000;
    }
    if (lingerUntil !== null && Date.now() >= lingerUntil) break;
    let views;
    try {
      views = await consumer.receive(batch, invisible);
    } catch (err) {
      emit({ event: 'receive_error', error: errorText(err), code: err && err.code });
      await sleep(200);
      continue;
    }
    for (const view of views) {
      deliveries++;
      emit(describe(view));
      try {
        if ((view.deliveryAttempt || 1) > nackTimes) {
          await consumer.ack(view);
          acks++;
          emit({ event: 'acked', messageId: view.messageId });
        } else if (changeTo !== null) {
          const before = view.receiptHandle;
          await consumer.changeInvisibleDuration(view, changeTo);
          emit({ event: 'changed', messageId: view.messageId, before, after: view.receiptHandle });
        }
      } catch (err) {
        emit({ event: 'settle_error', messageId: view.messageId, error: errorText(err), code: err && err.code });
      }
    }
  }
  await consumer.shutdown();
  emit({ event: 'done', acks, deliveries });
  return 0;
});
