/*
 * Sub-commands of CompatMain for delay levels, retries and dead letters, transactions and request/reply,
 * using only the official client's public API. Options as in CompatMain (--namesrv, --topic, --group,
 * --count, --timeout, --log-dir) plus:
 *
 *   delay     --level L | --timer-ms T (5.x TIMER_DELIVER_MS set by hand), --min-delay-ms D
 *             sends --count messages, consumes them; prints CONSUMED, EARLY (stored again less than D ms
 *             after birth, or before TIMER_DELIVER_MS), DUPLICATES
 *   retry     --fail-times K, --max-reconsume M: the listener answers RECONSUME_LATER while reconsumeTimes < K;
 *             with K > M every message ends in %DLQ%<group>; prints CONSUMED, DLQ, DUPLICATES
 *   tx        TransactionMQProducer: message i commits (i%3==0), rolls back (i%3==1) or is UNKNOW until the
 *             broker checks back (i%3==2, then commit); prints CHECKED, CONSUMED, ROLLED_BACK_SEEN, DUPLICATES
 *   request   DefaultMQProducer.request() answered by a consumer through MessageUtil.createReplyMessage;
 *             prints REPLIED, WRONG
 *
 * With --pause-after-send S, delay and tx print SENT_ALL after sending and wait S seconds before going on
 * (the test restarts the broker then). Each ends with "OK" or "FAIL: reason", like CompatMain.
 */

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class CompatFeatures {

    /** Messages by body; a count per body tells duplicates apart. */
    static final Map<String, AtomicInteger> received = new ConcurrentHashMap<>();
    static final AtomicInteger duplicates = new AtomicInteger();

    static boolean record(String body) {
        boolean first = received.computeIfAbsent(body, k -> new AtomicInteger()).incrementAndGet() == 1;
        if (!first) duplicates.incrementAndGet();
        return first;
    }

    static String body(MessageExt m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    static DefaultMQPushConsumer consumer(String group, String topic, MessageListenerConcurrently listener)
        throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(CompatMain.opt("namesrv", null));
        c.setInstanceName(CompatMain.instanceName("consumer"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(1);
        // The broker creates %RETRY%<group> at our first heartbeat: learn its route soon, not in 30 s.
        c.setPollNameServerInterval(1000);
        c.subscribe(topic, "*");
        c.registerMessageListener(listener);
        c.start();
        return c;
    }

    static DefaultMQProducer producer(DefaultMQProducer p) throws Exception {
        p.setNamesrvAddr(CompatMain.opt("namesrv", null));
        p.setInstanceName(CompatMain.instanceName("producer"));
        p.setSendMsgTimeout(10000);
        p.setHeartbeatBrokerInterval(1000);
        p.start();
        return p;
    }

    /** Waits until {@code target} distinct bodies arrived, then a grace period for duplicates. */
    static void awaitReceived(int target, AtomicInteger counter) throws InterruptedException {
        while (counter.get() < target && CompatMain.remainingMs() > 2000) Thread.sleep(100);
        Thread.sleep(Math.min(3000, Math.max(0, CompatMain.remainingMs() - 1500)));
    }

    static void pauseAfterSend() throws InterruptedException {
        int seconds = Integer.parseInt(CompatMain.opt("pause-after-send", "0"));
        if (seconds > 0) {
            CompatMain.say("SENT_ALL");
            Thread.sleep(seconds * 1000L);
        }
    }

    static void check(boolean ok, String reason) {
        CompatMain.say("DUPLICATES " + duplicates.get());
        CompatMain.finish(ok && duplicates.get() == 0, duplicates.get() > 0 ? duplicates.get() + " duplicates" : reason);
    }

    // ------------------------------------------------------------------ delay

    static void delay() throws Exception {
        String topic = CompatMain.opt("topic", null), group = CompatMain.opt("group", null);
        int count = Integer.parseInt(CompatMain.opt("count", "10"));
        int level = Integer.parseInt(CompatMain.opt("level", "0"));
        long timerMs = Long.parseLong(CompatMain.opt("timer-ms", "0"));
        long minDelay = Long.parseLong(CompatMain.opt("min-delay-ms", "0"));
        final AtomicInteger consumed = new AtomicInteger(), early = new AtomicInteger();
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_pg"));
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "TagDelay", ("delay-" + i).getBytes(StandardCharsets.UTF_8));
            if (level > 0) m.setDelayTimeLevel(level);
            if (timerMs > 0) m.putUserProperty("TIMER_DELIVER_MS", Long.toString(System.currentTimeMillis() + timerMs));
            SendResult r = p.send(m);
            if (r.getSendStatus() != SendStatus.SEND_OK) CompatMain.finish(false, "send status " + r.getSendStatus());
        }
        pauseAfterSend();
        DefaultMQPushConsumer c = consumer(group, topic, (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String deliverMs = m.getUserProperty("TIMER_DELIVER_MS");
                long due = deliverMs != null ? Long.parseLong(deliverMs) : m.getBornTimestamp() + minDelay - 100;
                if (m.getStoreTimestamp() < due) early.incrementAndGet();
                if (record(body(m))) consumed.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        awaitReceived(count, consumed);
        c.shutdown();
        p.shutdown();
        CompatMain.say("CONSUMED " + consumed.get());
        CompatMain.say("EARLY " + early.get());
        check(consumed.get() == count && early.get() == 0, "consumed " + consumed.get() + ", early " + early.get());
    }

    // ------------------------------------------------------------------ retry and dead letters

    static void retry() throws Exception {
        String topic = CompatMain.opt("topic", null), group = CompatMain.opt("group", null);
        int count = Integer.parseInt(CompatMain.opt("count", "10"));
        final int failTimes = Integer.parseInt(CompatMain.opt("fail-times", "1"));
        int maxReconsume = Integer.parseInt(CompatMain.opt("max-reconsume", "16"));
        final AtomicInteger consumed = new AtomicInteger(), wrongTopic = new AtomicInteger();
        final AtomicInteger dead = new AtomicInteger();
        DefaultMQProducer p = producer(new DefaultMQProducer(group + "_pg"));
        for (int i = 0; i < count; i++) {
            p.send(new Message(topic, "TagRetry", ("retry-" + i).getBytes(StandardCharsets.UTF_8)));
        }
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            MessageExt m = msgs.get(0);
            if (!topic.equals(m.getTopic())) wrongTopic.incrementAndGet();
            if (m.getReconsumeTimes() < failTimes) return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            if (record(body(m))) consumed.incrementAndGet();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        DefaultMQPushConsumer main = new DefaultMQPushConsumer(group);
        main.setNamesrvAddr(CompatMain.opt("namesrv", null));
        main.setInstanceName(CompatMain.instanceName("retry"));
        main.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        main.setConsumeMessageBatchMaxSize(1);
        main.setPollNameServerInterval(1000);
        main.setMaxReconsumeTimes(maxReconsume);
        main.subscribe(topic, "*");
        main.registerMessageListener(listener);
        main.start();
        boolean toDlq = failTimes > maxReconsume;
        DefaultMQPushConsumer dlq = null;
        if (toDlq) {
            dlq = consumer(group + "_dlq", "%DLQ%" + group, (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    if (record("dlq:" + body(m))) dead.incrementAndGet();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        awaitReceived(count, toDlq ? dead : consumed);
        main.shutdown();
        if (dlq != null) dlq.shutdown();
        p.shutdown();
        CompatMain.say("CONSUMED " + consumed.get());
        CompatMain.say("DLQ " + dead.get());
        CompatMain.say("WRONG_TOPIC " + wrongTopic.get());
        boolean ok = toDlq ? dead.get() == count && consumed.get() == 0 : consumed.get() == count && dead.get() == 0;
        check(ok && wrongTopic.get() == 0, "consumed " + consumed.get() + ", dead " + dead.get());
    }

    // ------------------------------------------------------------------ transactions

    static void tx() throws Exception {
        String topic = CompatMain.opt("topic", null), group = CompatMain.opt("group", null);
        int count = Integer.parseInt(CompatMain.opt("count", "30"));
        final AtomicInteger checked = new AtomicInteger(), consumed = new AtomicInteger();
        final AtomicInteger rolledBackSeen = new AtomicInteger();
        TransactionMQProducer p = new TransactionMQProducer(group + "_tpg");
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                switch ((Integer) arg % 3) {
                    case 0: return LocalTransactionState.COMMIT_MESSAGE;
                    case 1: return LocalTransactionState.ROLLBACK_MESSAGE;
                    default: return LocalTransactionState.UNKNOW;
                }
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checked.incrementAndGet();
                return body(msg).startsWith("tx-unknown-")
                    ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        producer(p);
        int expected = 0;
        for (int i = 0; i < count; i++) {
            String kind = i % 3 == 0 ? "commit" : i % 3 == 1 ? "rollback" : "unknown";
            if (i % 3 != 1) expected++;
            Message m = new Message(topic, "TagTx", ("tx-" + kind + "-" + i).getBytes(StandardCharsets.UTF_8));
            TransactionSendResult r = p.sendMessageInTransaction(m, i);
            if (r.getSendStatus() != SendStatus.SEND_OK) CompatMain.finish(false, "send status " + r.getSendStatus());
        }
        pauseAfterSend();
        DefaultMQPushConsumer c = consumer(group, topic, (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (body(m).startsWith("tx-rollback-")) rolledBackSeen.incrementAndGet();
                else if (record(body(m))) consumed.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        awaitReceived(expected, consumed);
        c.shutdown();
        p.shutdown();
        CompatMain.say("CHECKED " + checked.get());
        CompatMain.say("CONSUMED " + consumed.get());
        CompatMain.say("ROLLED_BACK_SEEN " + rolledBackSeen.get());
        check(consumed.get() == expected && rolledBackSeen.get() == 0 && checked.get() >= count / 3,
            "consumed " + consumed.get() + " of " + expected + ", checked " + checked.get());
    }

    // ------------------------------------------------------------------ request/reply

    static void request() throws Exception {
        String topic = CompatMain.opt("topic", null), group = CompatMain.opt("group", null);
        int count = Integer.parseInt(CompatMain.opt("count", "10"));
        final DefaultMQProducer replier = producer(new DefaultMQProducer(group + "_replier"));
        DefaultMQPushConsumer c = consumer(group, topic, (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (!"TagRequest".equals(m.getTags())) continue;
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("reply:" + body(m)).getBytes(StandardCharsets.UTF_8));
                    replier.send(reply);
                } catch (Exception e) {
                    CompatMain.say("REPLY_ERROR " + e);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        DefaultMQProducer requester = producer(new DefaultMQProducer(group + "_requester"));
        // A first ordinary send learns the route; the next heartbeat (1 s) tells the broker who we are.
        requester.send(new Message(topic, "TagWarmUp", "warm-up".getBytes(StandardCharsets.UTF_8)));
        Thread.sleep(2000);
        int replied = 0, wrong = 0;
        for (int i = 0; i < count; i++) {
            String question = "question-" + i;
            Message answer = requester.request(new Message(topic, "TagRequest", question.getBytes(StandardCharsets.UTF_8)), 10000);
            if (answer != null && ("reply:" + question).equals(new String(answer.getBody(), StandardCharsets.UTF_8))) {
                replied++;
            } else {
                wrong++;
            }
        }
        c.shutdown();
        requester.shutdown();
        replier.shutdown();
        CompatMain.say("REPLIED " + replied);
        CompatMain.say("WRONG " + wrong);
        CompatMain.finish(replied == count, "replied " + replied + " of " + count);
    }
}
