import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Apache RocketMQ 5.x Java remoting client against our servers, public API only.
 *
 * <pre>
 * produce  --count N --run-id R          5.x DefaultMQProducer, sync sends; prints "SENT N"
 * setmode  --broker ADDR                  DefaultMQAdminExt.setMessageRequestMode(POP), as mqadmin setConsumeMode -m POP
 * pop      --count N --run-id R [--fail-key K [--leave-failed]] [--invisible MS] [--sql EXPR]
 *          DefaultMQPushConsumer with setClientRebalance(false): the broker assigns queues and, in POP mode, the
 *          consumer pops and acks. The listener throws on K's first delivery (redelivered after the invisible time).
 *          --leave-failed counts K's failure as its end (the broker must bring it back later, to someone else).
 *          With --count 0 it only watches for --timeout seconds; --sql subscribes by an SQL92 filter instead of TagA.
 *          Prints GOT key per message, CONSUMED, DUPLICATES, POPPED (deliveries carrying a pop checkpoint), REDELIVERED K ms attempts, OK.
 * </pre>
 * Messages are "R-i": key R-i, tag TagA, property index=i, body "body R-i ✓". Exit 3 on timeout.
 */
public class Pop5Main {
    private static final String PRODUCER_GROUP = "pop5_java_producer";

    public static void main(String[] args) throws Exception {
        Map<String, String> opt = new HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            opt.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        long timeoutMs = Long.parseLong(opt.getOrDefault("timeout", "60")) * 1000L;
        switch (args[0]) {
            case "produce":
                produce(opt);
                break;
            case "setmode":
                setMode(opt);
                break;
            case "pop":
                pop(opt, timeoutMs);
                break;
            default:
                throw new IllegalArgumentException("unknown command " + args[0]);
        }
        System.out.println("OK");
        System.out.flush();
        System.exit(0);
    }

    private static String body(String key) {
        return "body " + key + " \u2713";
    }

    private static void produce(Map<String, String> opt) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(PRODUCER_GROUP);
        producer.setNamesrvAddr(opt.get("namesrv"));
        producer.start();
        int count = Integer.parseInt(opt.get("count"));
        String runId = opt.get("run-id");
        int sent = 0;
        for (int i = 0; i < count; i++) {
            String key = runId + "-" + i;
            Message msg = new Message(opt.get("topic"), "TagA", key, body(key).getBytes(StandardCharsets.UTF_8));
            msg.putUserProperty("index", String.valueOf(i));
            SendResult result = producer.send(msg);
            if (result.getSendStatus() != SendStatus.SEND_OK) {
                throw new IllegalStateException("send " + key + ": " + result);
            }
            sent++;
        }
        producer.shutdown();
        System.out.println("SENT " + sent);
    }

    private static void setMode(Map<String, String> opt) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(opt.get("namesrv"));
        admin.start();
        admin.setMessageRequestMode(opt.get("broker"), opt.get("topic"), opt.get("group"), MessageRequestMode.POP, -1,
            5000);
        admin.shutdown();
        System.out.println("MODE POP");
    }

    private static void pop(Map<String, String> opt, long timeoutMs) throws Exception {
        final int count = Integer.parseInt(opt.get("count"));
        final String runId = opt.get("run-id");
        final String failKey = opt.get("fail-key");
        final boolean leaveFailed = opt.containsKey("leave-failed");
        final Map<String, Integer> seen = new ConcurrentHashMap<>();
        final List<String> problems = new ArrayList<>();
        final AtomicInteger popped = new AtomicInteger();
        final AtomicInteger duplicates = new AtomicInteger();
        final Map<String, Long> failedAt = new ConcurrentHashMap<>();
        final CountDownLatch done = new CountDownLatch(count);

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(opt.get("group"));
        consumer.setNamesrvAddr(opt.get("namesrv"));
        consumer.setClientRebalance(false);
        consumer.setPopInvisibleTime(Long.parseLong(opt.getOrDefault("invisible", "60000")));
        if (opt.containsKey("sql")) {
            consumer.subscribe(opt.get("topic"), MessageSelector.bySql(opt.get("sql")));
        } else {
            consumer.subscribe(opt.get("topic"), "TagA");
        }
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                String key = msg.getKeys();
                if (key == null || !key.startsWith(runId + "-")) {
                    continue;
                }
                if (msg.getProperty(MessageConst.PROPERTY_POP_CK) != null) {
                    popped.incrementAndGet();
                }
                String text = new String(msg.getBody(), StandardCharsets.UTF_8);
                String index = key.substring(runId.length() + 1);
                if (!text.equals(body(key)) || !"TagA".equals(msg.getTags()) || !index.equals(msg.getUserProperty("index"))) {
                    synchronized (problems) {
                        problems.add(key + " body=" + text + " tags=" + msg.getTags() + " index=" + msg.getUserProperty("index"));
                    }
                }
                if (key.equals(failKey) && !failedAt.containsKey(key)) {
                    failedAt.put(key, System.currentTimeMillis());
                    if (leaveFailed) {
                        done.countDown();
                    }
                    throw new IllegalStateException("listener fails " + key + " once");
                }
                if (failedAt.containsKey(key)) {
                    System.out.println("REDELIVERED " + key + " " + (System.currentTimeMillis() - failedAt.get(key))
                        + " " + msg.getReconsumeTimes());
                }
                if (seen.merge(key, 1, Integer::sum) > 1) {
                    duplicates.incrementAndGet();
                } else {
                    System.out.println("GOT " + key + " " + msg.getReconsumeTimes());
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean all = true;
        if (count == 0) {
            Thread.sleep(timeoutMs); // --count 0 watches for the whole timeout: nothing should arrive
        } else {
            all = done.await(timeoutMs, TimeUnit.MILLISECONDS);
        }
        System.out.println("CONSUMED " + seen.size());
        System.out.println("DUPLICATES " + duplicates.get());
        System.out.println("POPPED " + popped.get());
        synchronized (problems) {
            for (String p : problems) {
                System.out.println("MISMATCH " + p);
            }
        }
        System.out.flush();
        consumer.shutdown();
        if (!all) {
            System.exit(3);
        }
    }
}
