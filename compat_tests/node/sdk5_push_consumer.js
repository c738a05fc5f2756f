'use strict';
// node sdk5_push_consumer.js --endpoints H:P --topic T --group G [--acks N] [--fail-times K] [--fail-tag TAG]
//     [--work-ms MS] [--linger S]
//   A PushConsumer whose listener spends --work-ms on each message and fails deliveries K or fewer (of the
//   messages tagged --fail-tag only, when given), printing {"event":"failed","messageId","deliveryAttempt"}. Every delivery prints a "msg" event
//   (sdk5_common.describe) with "active": how many listener calls were running at once.
//   It stops after N successful consumptions and --linger seconds more, printing {"event":"done","acks"}.
//   See sdk5_common.js for the common options.

const { PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');
const { emit, sleep, clientOptions, subscriptions, describe, run } = require('./sdk5_common');

run([ 'group' ], async args => {
  const wantAcks = Number(args.acks || Infinity);
  const failTimes = Number(args['fail-times'] || 0);
  const failTag = args['fail-tag'];
  const workMs = Number(args['work-ms'] || 0);
  let active = 0;
  let successes = 0;
  let reached;
  const enough = new Promise(resolve => { reached = resolve; });
  const consumer = new PushConsumer({
    ...clientOptions(args),
    consumerGroup: args.group,
    subscriptions: subscriptions(args),
    messageListener: {
      async consume(view) {
        active++;
        emit({ ...describe(view), active });
        try {
          if (workMs) await sleep(workMs);
          if ((!failTag || view.tag === failTag) && (view.deliveryAttempt || 1) <= failTimes) {
            emit({ event: 'failed', messageId: view.messageId, deliveryAttempt: view.deliveryAttempt });
            return ConsumeResult.FAILURE;
          }
          successes++;
          if (successes >= wantAcks) reached();
          return ConsumeResult.SUCCESS;
        } finally {
          active--;
        }
      },
    },
  });
  await consumer.startup();
  emit({ event: 'ready' });
  await enough;
  await sleep(Number(args.linger || 0) * 1000);
  // shutdown() waits out the receive calls still polling (up to the long-polling timeout): not worth waiting for.
  await Promise.race([ consumer.shutdown(), sleep(3000) ]);
  emit({ event: 'done', acks: successes });
  return 0;
});
