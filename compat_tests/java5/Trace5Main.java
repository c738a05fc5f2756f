import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Apache RocketMQ 5.x Java remoting client with message trace on (enableMsgTrace), public API only.
 *
 * <pre>
 * trace --namesrv A --topic T --group G --count N --run-id R
 *   a traced DefaultMQProducer sends N messages (key R-i, tag TagA) and one timed message (deliverTimeMs an hour
 *   ahead) that it recalls (a Recall trace record when -Dcom.rocketmq.recall.default.trace.enable=true); a traced
 *   TransactionMQProducer sends one half message and commits it; a traced DefaultMQPushConsumer (group G)
 *   consumes the N + 1, failing R-0's first delivery. Prints SENT, RECALLED, COMMITTED, CONSUMED, OK.
 * </pre>
 * Exit 3 on timeout.
 */
public class Trace5Main {
    public static void main(String[] args) throws Exception {
        java.util.Map<String, String> opt = new java.util.HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            opt.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        long timeoutMs = Long.parseLong(opt.getOrDefault("timeout", "60")) * 1000L;
        String namesrv = opt.get("namesrv");
        String topic = opt.get("topic");
        String runId = opt.get("run-id");
        int count = Integer.parseInt(opt.get("count"));

        DefaultMQProducer producer = new DefaultMQProducer(opt.get("group") + "_pg", true, null);
        producer.setNamesrvAddr(namesrv);
        producer.start();
        for (int i = 0; i < count; i++) {
            String key = runId + "-" + i;
            SendResult r = producer.send(new Message(topic, "TagA", key, ("body " + key).getBytes(StandardCharsets.UTF_8)));
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                throw new IllegalStateException("send " + key + ": " + r);
            }
        }
        System.out.println("SENT " + count);
        Message timed = new Message(topic, "TagA", runId + "-recalled", "recalled".getBytes(StandardCharsets.UTF_8));
        timed.setDeliverTimeMs(System.currentTimeMillis() + 3_600_000L);
        SendResult timedResult = producer.send(timed);
        System.out.println("RECALLED " + producer.recallMessage(topic, timedResult.getRecallHandle()));

        TransactionMQProducer tx = new TransactionMQProducer(opt.get("group") + "_tpg", null, true, null);
        tx.setNamesrvAddr(namesrv);
        tx.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        tx.start();
        String txKey = runId + "-tx";
        SendResult txResult = tx.sendMessageInTransaction(
            new Message(topic, "TagA", txKey, ("body " + txKey).getBytes(StandardCharsets.UTF_8)), null);
        System.out.println("COMMITTED " + txResult.getMsgId());

        final CountDownLatch done = new CountDownLatch(count + 1);
        final java.util.Set<String> failed = java.util.concurrent.ConcurrentHashMap.newKeySet();
        final java.util.Set<String> seen = java.util.concurrent.ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(opt.get("group"), true, null);
        consumer.setNamesrvAddr(namesrv);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                String key = msg.getKeys();
                if (key == null || !key.startsWith(runId + "-")) {
                    continue;
                }
                if (key.equals(runId + "-0") && failed.add(key)) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                if (seen.add(key)) {
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        if (!done.await(timeoutMs, TimeUnit.MILLISECONDS)) {
            System.out.println("CONSUMED " + seen.size());
            System.out.flush();
            System.exit(3);
        }
        System.out.println("CONSUMED " + seen.size());
        // The 5.x dispatcher ships a batch every 5 s (flushTraceInterval); a flush at shutdown races the trace
        // producer's own shutdown, so let the timed flush go first.
        Thread.sleep(6000);
        consumer.shutdown();
        tx.shutdown();
        producer.shutdown();
        System.out.println("OK");
        System.out.flush();
        System.exit(0);
    }
}
