/*
 * Compatibility driver for rocketmq-gateway: exercises our NameServer/Broker with the
 * official Apache RocketMQ 4.x Java client, using only its public API
 * (org.apache.rocketmq.client.*, org.apache.rocketmq.common.message.*).
 *
 * Sub-commands:
 *   produce    sync, async, oneway and batch sends (tags, keys, user properties)
 *   push       DefaultMQPushConsumer (clustering) consumes and verifies the messages
 *   litepull   DefaultLitePullConsumer (subscribe mode) consumes and verifies the messages
 *   delay, retry, tx, request   see CompatFeatures.java
 *   orderly    two MessageListenerOrderly push consumers of one group (two client instances in this JVM)
 *              consume messages sent in order per key (MessageQueueSelector); the second one joins halfway.
 *              Checks each key's order, that no queue is consumed by both at once, and no duplicates.
 *              Options: --keys K (default 8), --per-key N (default 40); prints "ORDERED <n>", "REPEATS <n>", "OVERLAPS <n>".
 *   broadcast  two BROADCASTING push consumers of one group each consume every message of the run
 *              (as produced by "produce"); prints "CONSUMED <member> <n>".
 *
 * Common options:
 *   --namesrv HOST:PORT   name server address (required)
 *   --topic T             topic (required)
 *   --group G             producer / consumer group (required)
 *   --count N             messages per send mode (default 100)
 *   --modes a,b,..        send modes among sync,async,oneway,batch (default: all four)
 *   --run-id ID           tag written into each body so runs on one topic stay apart (default "run")
 *   --timeout SECONDS     hard bound on the whole run; exceeded => "FAIL: timeout", exit 3 (default 60)
 *   --log-dir DIR         where the client writes its own log (default: a fresh temp dir)
 * Consumer-only options:
 *   --subexpr EXPR        subscription expression, e.g. "TagSync || TagBatch" (default "*")
 *   --expect-modes a,b    the modes the consumer must receive (default: --modes)
 *   --grace SECONDS       after everything arrived, keep listening this long for duplicates (default 3)
 *   --allow-dups          do not fail on duplicate deliveries (they are still counted)
 *   --no-foreign          fail if any message of another run is delivered (checks resumed offsets)
 *   --sql EXPR            subscribe with MessageSelector.bySql(EXPR) instead of --subexpr
 * Security options (produce, push, litepull):
 *   --access-key AK --secret-key SK   sign every request (AclClientRPCHook) for a broker with ACL
 *   --tls                 speak TLS (system property tls.enable=true, as an application would set it)
 *   --tls-trust CA.pem    verify the server against this CA (tls.client.authServer, tls.test.mode.enable=false)
 *   --tls-cert C.pem --tls-key K.pem   present this client certificate (PKCS#8 key)
 * Trace option (produce, push):
 *   --trace               enableMsgTrace: the client writes its trace records to RMQ_SYS_TRACE_TOPIC
 *
 * Output: lines such as "SENT <n>", "CONSUMED <n>", "DUPLICATES <n>", "MISMATCH ...", then a
 * final "OK" (exit 0) or "FAIL: reason" (exit 1; 2 for bad usage; 3 for timeout).
 */

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.RPCHook;

public class CompatMain {

    static final List<String> ALL_MODES = Arrays.asList("sync", "async", "oneway", "batch");
    static final int BATCH_SIZE = 25;
    static final String UNICODE_VALUE = "gr\u00fc\u00dfe-\u4f60\u597d";

    // ------------------------------------------------------------------ message layout

    static String tagFor(String mode) {
        return "Tag" + Character.toUpperCase(mode.charAt(0)) + mode.substring(1);
    }

    static String keysFor(String runId, String mode, int i) {
        return "key-" + runId + "-" + mode + "-" + i + " k2-" + mode + "-" + i;
    }

    static String bodyFor(String runId, String mode, int i) {
        return "compat|" + runId + "|" + mode + "|" + i + "|payload-" + i;
    }

    static Message buildMessage(String topic, String runId, String mode, int i) {
        Message m = new Message(topic, tagFor(mode), keysFor(runId, mode, i),
            bodyFor(runId, mode, i).getBytes(StandardCharsets.UTF_8));
        m.putUserProperty("compatRun", runId);
        m.putUserProperty("compatMode", mode);
        m.putUserProperty("compatIndex", Integer.toString(i));
        m.putUserProperty("compatUnicode", UNICODE_VALUE);
        return m;
    }

    /** Returns null when the message is intact, else a description of what differs. */
    static String verify(MessageExt m, String topic, String runId, String mode, int i) {
        List<String> bad = new ArrayList<>();
        if (!topic.equals(m.getTopic())) bad.add("topic=" + m.getTopic());
        if (!tagFor(mode).equals(m.getTags())) bad.add("tags=" + m.getTags());
        if (!keysFor(runId, mode, i).equals(m.getKeys())) bad.add("keys=" + m.getKeys());
        if (!runId.equals(m.getUserProperty("compatRun"))) bad.add("compatRun=" + m.getUserProperty("compatRun"));
        if (!mode.equals(m.getUserProperty("compatMode"))) bad.add("compatMode=" + m.getUserProperty("compatMode"));
        if (!Integer.toString(i).equals(m.getUserProperty("compatIndex"))) bad.add("compatIndex=" + m.getUserProperty("compatIndex"));
        if (!UNICODE_VALUE.equals(m.getUserProperty("compatUnicode"))) bad.add("compatUnicode=" + m.getUserProperty("compatUnicode"));
        if (m.getMsgId() == null || m.getMsgId().isEmpty()) bad.add("msgId empty");
        if (m.getQueueOffset() < 0) bad.add("queueOffset=" + m.getQueueOffset());
        if (m.getReconsumeTimes() != 0) bad.add("reconsumeTimes=" + m.getReconsumeTimes());
        return bad.isEmpty() ? null : String.join(", ", bad);
    }

    // ------------------------------------------------------------------ plumbing

    static Map<String, String> opts = new HashMap<>();
    static Set<String> flags = new LinkedHashSet<>();

    static String opt(String name, String dflt) {
        String v = opts.get(name);
        if (v == null) {
            if (dflt == null) usage("missing --" + name);
            return dflt;
        }
        return v;
    }

    static void usage(String why) {
        System.out.println("FAIL: usage: " + why);
        System.out.println("usage: CompatMain produce|push|litepull --namesrv H:P --topic T --group G [--count N] "
            + "[--modes sync,async,oneway,batch] [--run-id ID] [--timeout S] [--log-dir D] "
            + "[--subexpr EXPR] [--expect-modes m,..] [--grace S] [--allow-dups] [--no-foreign] [--verbose] [--trace]");
        System.out.flush();
        System.exit(2);
    }

    static List<String> modesOpt(String name, List<String> dflt) {
        String v = opts.get(name);
        if (v == null) return dflt;
        List<String> out = new ArrayList<>();
        for (String s : v.split(",")) {
            s = s.trim();
            if (s.isEmpty()) continue;
            if (!ALL_MODES.contains(s)) usage("unknown mode " + s);
            out.add(s);
        }
        return out;
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void finish(boolean ok, String reason) {
        say(ok ? "OK" : "FAIL: " + reason);
        // The client keeps non-daemon threads; never let shutdown hang past the deadline.
        Runtime.getRuntime().halt(ok ? 0 : 1);
    }

    static long deadline;

    static long remainingMs() {
        return deadline - System.currentTimeMillis();
    }

    static void startWatchdog(final int timeoutSec) {
        deadline = System.currentTimeMillis() + timeoutSec * 1000L;
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(timeoutSec * 1000L);
            } catch (InterruptedException e) {
                return;
            }
            say("FAIL: timeout after " + timeoutSec + "s");
            Runtime.getRuntime().halt(3);
        }, "compat-watchdog");
        t.setDaemon(true);
        t.start();
    }

    static String instanceName(String role) {
        String pid = java.lang.management.ManagementFactory.getRuntimeMXBean().getName().split("@")[0];
        return "compat-" + role + "-" + pid + "-" + System.nanoTime();
    }

    static void setupLogging() throws IOException {
        String dir = opts.get("log-dir");
        File f = dir != null ? new File(dir) : Files.createTempDirectory("rmq-compat-log").toFile();
        f.mkdirs();
        // Must be set before any client class initialises its logger.
        System.setProperty("rocketmq.client.logRoot", f.getAbsolutePath());
        System.setProperty("rocketmq.client.logUseSlf4j", "false");
        System.setProperty("rocketmq.client.logLevel", "WARN");
        System.setProperty("rocketmq.client.logFileMaxIndex", "2");
        say("LOGDIR " + f.getAbsolutePath());
    }

    // ------------------------------------------------------------------ security (ACL, TLS)

    static RPCHook rpcHook() {
        String ak = opts.get("access-key");
        return ak == null ? null : new AclClientRPCHook(new SessionCredentials(ak, opt("secret-key", "")));
    }

    static void setupTls() {
        // TlsSystemConfig reads these when the client classes load, so before any client object exists.
        if (!flags.contains("tls")) return;
        System.setProperty("tls.enable", "true");
        String ca = opts.get("tls-trust");
        if (ca != null) {
            System.setProperty("tls.test.mode.enable", "false");
            System.setProperty("tls.client.authServer", "true");
            System.setProperty("tls.client.trustCertPath", ca);
        }
        if (opts.containsKey("tls-cert")) {
            System.setProperty("tls.test.mode.enable", "false");
            System.setProperty("tls.client.certPath", opts.get("tls-cert"));
            System.setProperty("tls.client.keyPath", opt("tls-key", null));
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) usage("missing sub-command");
        String cmd = args[0];
        for (int k = 1; k < args.length; k++) {
            String a = args[k];
            if (!a.startsWith("--")) usage("unexpected argument " + a);
            String name = a.substring(2);
            if (name.equals("allow-dups") || name.equals("verbose") || name.equals("no-foreign") || name.equals("tls")
                || name.equals("trace")) {
                flags.add(name);
            } else {
                if (k + 1 >= args.length) usage("missing value for " + a);
                opts.put(name, args[++k]);
            }
        }
        startWatchdog(Integer.parseInt(opt("timeout", "60")));
        setupLogging();
        setupTls();
        try {
            switch (cmd) {
                case "produce":
                    produce();
                    break;
                case "push":
                    consume(false);
                    break;
                case "litepull":
                    consume(true);
                    break;
                case "delay":
                    CompatFeatures.delay();
                    break;
                case "retry":
                    CompatFeatures.retry();
                    break;
                case "tx":
                    CompatFeatures.tx();
                    break;
                case "request":
                    CompatFeatures.request();
                    break;
                case "orderly":
                    orderly();
                    break;
                case "broadcast":
                    broadcast();
                    break;
                default:
                    usage("unknown sub-command " + cmd);
            }
        } catch (Throwable e) {
            e.printStackTrace(System.out);
            finish(false, "exception " + e);
        }
    }

    // ------------------------------------------------------------------ producer

    static void produce() throws Exception {
        String ns = opt("namesrv", null), topic = opt("topic", null), group = opt("group", null);
        String runId = opt("run-id", "run");
        int count = Integer.parseInt(opt("count", "100"));
        List<String> modes = modesOpt("modes", ALL_MODES);

        DefaultMQProducer p = new DefaultMQProducer(group, rpcHook(), flags.contains("trace"), null);
        p.setNamesrvAddr(ns);
        p.setInstanceName(instanceName("producer"));
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendFailed(2);
        p.setRetryTimesWhenSendAsyncFailed(2);
        p.start();

        int total = 0;
        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        for (String mode : modes) {
            int sent = 0;
            switch (mode) {
                case "sync":
                    for (int i = 0; i < count; i++) {
                        SendResult r = p.send(buildMessage(topic, runId, mode, i));
                        String bad = checkSendResult(r, topic);
                        if (bad != null) errors.add("sync " + i + ": " + bad);
                        else sent++;
                    }
                    break;
                case "async": {
                    final CountDownLatch latch = new CountDownLatch(count);
                    final AtomicInteger ok = new AtomicInteger();
                    for (int i = 0; i < count; i++) {
                        final int idx = i;
                        p.send(buildMessage(topic, runId, mode, i), new SendCallback() {
                            @Override
                            public void onSuccess(SendResult r) {
                                String bad = checkSendResult(r, topic);
                                if (bad != null) errors.add("async " + idx + ": " + bad);
                                else ok.incrementAndGet();
                                latch.countDown();
                            }

                            @Override
                            public void onException(Throwable e) {
                                errors.add("async " + idx + ": " + e);
                                latch.countDown();
                            }
                        });
                    }
                    if (!latch.await(Math.max(1, remainingMs()), TimeUnit.MILLISECONDS)) {
                        errors.add("async callbacks missing: " + latch.getCount());
                    }
                    sent = ok.get();
                    break;
                }
                case "oneway":
                    for (int i = 0; i < count; i++) {
                        p.sendOneway(buildMessage(topic, runId, mode, i));
                        sent++;
                    }
                    break;
                case "batch":
                    for (int start = 0; start < count; start += BATCH_SIZE) {
                        List<Message> batch = new ArrayList<>();
                        for (int i = start; i < Math.min(count, start + BATCH_SIZE); i++) {
                            batch.add(buildMessage(topic, runId, mode, i));
                        }
                        SendResult r = p.send(batch);
                        String bad = checkSendResult(r, topic);
                        if (bad == null && r.getMsgId() != null && r.getMsgId().split(",").length != batch.size()) {
                            bad = "batch msgId count " + r.getMsgId().split(",").length + " != " + batch.size();
                        }
                        if (bad != null) errors.add("batch@" + start + ": " + bad);
                        else sent += batch.size();
                    }
                    break;
                default:
                    throw new IllegalStateException(mode);
            }
            say("SENT " + mode + " " + sent);
            total += sent;
        }
        say("SENT " + total);
        p.shutdown();
        int expected = count * modes.size();
        for (int k = 0; k < Math.min(10, errors.size()); k++) say("ERROR " + errors.get(k));
        if (!errors.isEmpty()) finish(false, errors.size() + " send errors");
        else if (total != expected) finish(false, "sent " + total + " of " + expected);
        else finish(true, null);
    }

    static String checkSendResult(SendResult r, String topic) {
        if (r == null) return "null SendResult";
        if (r.getSendStatus() != SendStatus.SEND_OK) return "status " + r.getSendStatus();
        if (r.getMsgId() == null || r.getMsgId().isEmpty()) return "empty msgId";
        if (r.getMessageQueue() == null || !topic.equals(r.getMessageQueue().getTopic())) return "bad queue " + r.getMessageQueue();
        if (r.getQueueOffset() < 0) return "bad queueOffset " + r.getQueueOffset();
        return null;
    }

    // ------------------------------------------------------------------ consumers

    static final Map<String, AtomicInteger> seen = new ConcurrentHashMap<>();
    static final AtomicInteger unique = new AtomicInteger();
    static final AtomicInteger duplicates = new AtomicInteger();
    static final AtomicInteger foreign = new AtomicInteger();
    static final List<String> problems = Collections.synchronizedList(new ArrayList<>());

    static void handle(MessageExt m, String topic, String runId, Set<String> expectModes, int count, boolean verbose) {
        String body = new String(m.getBody(), StandardCharsets.UTF_8);
        String[] parts = body.split("\\|");
        if (parts.length < 4 || !parts[0].equals("compat")) {
            problems.add("unparseable body '" + body + "' msgId=" + m.getMsgId());
            return;
        }
        if (!parts[1].equals(runId)) {
            foreign.incrementAndGet();  // another run on the same topic
            return;
        }
        String mode = parts[2];
        int i;
        try {
            i = Integer.parseInt(parts[3]);
        } catch (NumberFormatException e) {
            problems.add("bad index in body '" + body + "'");
            return;
        }
        if (!expectModes.contains(mode) || i < 0 || i >= count) {
            problems.add("unexpected message " + mode + "/" + i + " tags=" + m.getTags());
            return;
        }
        if (!body.equals(bodyFor(runId, mode, i))) problems.add(mode + "/" + i + ": body='" + body + "'");
        String bad = verify(m, topic, runId, mode, i);
        if (bad != null) problems.add(mode + "/" + i + ": " + bad);
        AtomicInteger c = seen.computeIfAbsent(mode + "/" + i, k -> new AtomicInteger());
        if (c.incrementAndGet() == 1) unique.incrementAndGet();
        else duplicates.incrementAndGet();
        if (verbose) say("RECV " + mode + "/" + i + " q=" + m.getQueueId() + " off=" + m.getQueueOffset());
    }

    static void consume(boolean lite) throws Exception {
        String ns = opt("namesrv", null), topic = opt("topic", null), group = opt("group", null);
        String runId = opt("run-id", "run");
        int count = Integer.parseInt(opt("count", "100"));
        List<String> modes = modesOpt("modes", ALL_MODES);
        final Set<String> expectModes = new LinkedHashSet<>(modesOpt("expect-modes", modes));
        String subexpr = opt("subexpr", "*");
        double grace = Double.parseDouble(opt("grace", "3"));
        final boolean verbose = flags.contains("verbose");
        final int expected = count * expectModes.size();

        final DefaultMQPushConsumer push;
        final DefaultLitePullConsumer pull;
        if (lite) {
            push = null;
            pull = new DefaultLitePullConsumer(group, rpcHook());
            pull.setNamesrvAddr(ns);
            pull.setInstanceName(instanceName("litepull"));
            pull.setMessageModel(MessageModel.CLUSTERING);
            pull.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            pull.setAutoCommit(true);
            pull.setPullBatchSize(16);
            if (opts.containsKey("sql")) pull.subscribe(topic, MessageSelector.bySql(opts.get("sql")));
            else pull.subscribe(topic, subexpr);
            pull.start();
        } else {
            pull = null;
            push = new DefaultMQPushConsumer(
                group, rpcHook(), new AllocateMessageQueueAveragely(), flags.contains("trace"), null);
            push.setNamesrvAddr(ns);
            push.setInstanceName(instanceName("push"));
            push.setMessageModel(MessageModel.CLUSTERING);
            push.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            push.setConsumeThreadMin(4);
            push.setConsumeThreadMax(4);
            push.setConsumeMessageBatchMaxSize(1);
            if (opts.containsKey("sql")) push.subscribe(topic, MessageSelector.bySql(opts.get("sql")));
            else push.subscribe(topic, subexpr);
            push.registerMessageListener(new MessageListenerConcurrently() {
                @Override
                public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                    for (MessageExt m : msgs) handle(m, topic, runId, expectModes, count, verbose);
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                }
            });
            push.start();
        }
        say("STARTED " + (lite ? "litepull" : "push") + " group=" + group + " subexpr=" + subexpr + " expect=" + expected);

        long graceUntil = -1;
        int lastReported = -1;
        while (true) {
            if (lite) {
                List<MessageExt> msgs = pull.poll(500);
                for (MessageExt m : msgs) handle(m, topic, runId, expectModes, count, verbose);
            } else {
                Thread.sleep(200);
            }
            int u = unique.get();
            if (u != lastReported && (u == expected || u / 50 != lastReported / 50)) {
                say("PROGRESS " + u + "/" + expected);
                lastReported = u;
            }
            if (u >= expected) {
                if (graceUntil < 0) graceUntil = System.currentTimeMillis() + (long) (grace * 1000);
                if (System.currentTimeMillis() >= graceUntil) break;
            }
            if (remainingMs() < 1500) break;  // report what we have before the watchdog fires
        }

        if (lite) {
            pull.commitSync();
            pull.shutdown();
        } else {
            push.shutdown();
        }

        say("CONSUMED " + unique.get());
        say("DUPLICATES " + duplicates.get());
        if (foreign.get() > 0) say("FOREIGN " + foreign.get());
        for (int k = 0; k < Math.min(10, problems.size()); k++) say("MISMATCH " + problems.get(k));
        if (unique.get() < expected) {
            List<String> missing = new ArrayList<>();
            for (String mode : expectModes) {
                for (int i = 0; i < count && missing.size() < 10; i++) {
                    if (!seen.containsKey(mode + "/" + i)) missing.add(mode + "/" + i);
                }
            }
            say("MISSING " + String.join(" ", missing) + (expected - unique.get() > missing.size() ? " ..." : ""));
            finish(false, "consumed " + unique.get() + " of " + expected);
        } else if (!problems.isEmpty()) {
            finish(false, problems.size() + " mismatched messages");
        } else if (foreign.get() > 0 && flags.contains("no-foreign")) {
            finish(false, foreign.get() + " messages of other runs delivered");
        } else if (duplicates.get() > 0 && !flags.contains("allow-dups")) {
            finish(false, duplicates.get() + " duplicate deliveries");
        } else {
            finish(true, null);
        }
    }

    // ------------------------------------------------------------------ orderly and broadcast

    static DefaultMQPushConsumer newPush(String ns, String group, String role, MessageModel model) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(instanceName(role));
        c.setMessageModel(model);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeThreadMin(4);
        c.setConsumeThreadMax(4);
        return c;
    }

    static void orderly() throws Exception {
        String ns = opt("namesrv", null), topic = opt("topic", null), group = opt("group", null);
        final int keys = Integer.parseInt(opt("keys", "8"));
        final int perKey = Integer.parseInt(opt("per-key", "40"));
        final Map<Integer, List<Integer>> seen = new ConcurrentHashMap<>();
        final Map<Integer, String> active = new ConcurrentHashMap<>();
        final AtomicInteger overlaps = new AtomicInteger();
        final AtomicInteger received = new AtomicInteger();
        // Rebalance and lock renewal every second instead of every 20 s, so the second member takes over fast.
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");
        System.setProperty("rocketmq.client.rebalance.lockInterval", "1000");

        DefaultMQProducer p = new DefaultMQProducer(group + "_producer");
        p.setNamesrvAddr(ns);
        p.setInstanceName(instanceName("producer"));
        p.start();
        List<DefaultMQPushConsumer> members = new ArrayList<>();
        for (String member : Arrays.asList("A", "B")) {
            DefaultMQPushConsumer c = newPush(ns, group, "orderly" + member, MessageModel.CLUSTERING);
            c.setConsumeMessageBatchMaxSize(3);
            c.subscribe(topic, "*");
            c.registerMessageListener(new MessageListenerOrderly() {
                @Override
                public ConsumeOrderlyStatus consumeMessage(List<MessageExt> msgs, ConsumeOrderlyContext ctx) {
                    int q = ctx.getMessageQueue().getQueueId();
                    String other = active.putIfAbsent(q, member);
                    if (other != null) {
                        overlaps.incrementAndGet();
                        say("OVERLAP queue " + q + " " + member + " while " + other);
                    }
                    try {
                        Thread.sleep(2);
                        for (MessageExt m : msgs) {
                            String[] kv = new String(m.getBody(), StandardCharsets.UTF_8).split(":");
                            seen.computeIfAbsent(Integer.parseInt(kv[0]), k -> Collections.synchronizedList(new ArrayList<>()))
                                .add(Integer.parseInt(kv[1]));
                            received.incrementAndGet();
                        }
                    } catch (InterruptedException e) {
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    } finally {
                        if (other == null) active.remove(q);
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                }
            });
            c.start();
            members.add(c);
            // Half of every key's messages while the first member is alone; the rest after the second joined.
            int from = member.equals("A") ? 0 : perKey / 2, to = member.equals("A") ? perKey / 2 : perKey;
            for (int seq = from; seq < to; seq++) {
                for (int key = 0; key < keys; key++) {
                    Message m = new Message(topic, "Ordered", ("" + key + ":" + seq).getBytes(StandardCharsets.UTF_8));
                    SendResult r = p.send(m, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), key);
                    if (r.getSendStatus() != SendStatus.SEND_OK) finish(false, "send " + key + ":" + seq + " " + r);
                }
            }
            say("SENT " + member + " " + (to - from) * keys);
        }
        int expected = keys * perKey;
        while (received.get() < expected && remainingMs() > 1500) Thread.sleep(100);
        Thread.sleep(1000);  // duplicates would arrive now
        for (DefaultMQPushConsumer c : members) c.shutdown();
        p.shutdown();
        int ordered = 0, repeats = 0;
        List<String> bad = new ArrayList<>();
        for (int key = 0; key < keys; key++) {
            List<Integer> got = seen.getOrDefault(key, Collections.emptyList());
            // When a queue changes hands the Java client may hand the new owner the message the old one was
            // consuming (its offset was persisted before that message's commit): an immediate repeat, which
            // Apache produces too. Anything else out of order is a failure.
            List<Integer> collapsed = new ArrayList<>();
            for (Integer seq : got) {
                if (!collapsed.isEmpty() && collapsed.get(collapsed.size() - 1).equals(seq)) repeats++;
                else collapsed.add(seq);
            }
            List<Integer> want = new ArrayList<>();
            for (int seq = 0; seq < perKey; seq++) want.add(seq);
            if (collapsed.equals(want)) ordered++;
            else if (bad.size() < 5) bad.add("key " + key + ": " + got);
        }
        say("RECEIVED " + received.get());
        say("ORDERED " + ordered);
        say("REPEATS " + repeats);
        say("OVERLAPS " + overlaps.get());
        for (String b : bad) say("MISMATCH " + b);
        finish(ordered == keys && received.get() == expected + repeats && repeats <= keys && overlaps.get() == 0,
            "ordered " + ordered + "/" + keys + ", received " + received.get() + "/" + expected + " with " + repeats
                + " handover repeats, overlaps " + overlaps.get());
    }

    static void broadcast() throws Exception {
        String ns = opt("namesrv", null), topic = opt("topic", null), group = opt("group", null);
        final String runId = opt("run-id", "run");
        final int count = Integer.parseInt(opt("count", "100"));
        final List<String> modes = modesOpt("modes", ALL_MODES);
        final int expected = count * modes.size();
        final Map<String, Set<String>> got = new ConcurrentHashMap<>();
        List<DefaultMQPushConsumer> members = new ArrayList<>();
        for (String member : Arrays.asList("A", "B")) {
            final Set<String> mine = ConcurrentHashMap.newKeySet();
            got.put(member, mine);
            DefaultMQPushConsumer c = newPush(ns, group, "broadcast" + member, MessageModel.BROADCASTING);
            c.subscribe(topic, "*");
            c.registerMessageListener(new MessageListenerConcurrently() {
                @Override
                public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs, ConsumeConcurrentlyContext ctx) {
                    for (MessageExt m : msgs) {
                        String[] parts = new String(m.getBody(), StandardCharsets.UTF_8).split("\\|");
                        if (parts.length >= 4 && parts[1].equals(runId) && !mine.add(parts[2] + "/" + parts[3])) {
                            duplicates.incrementAndGet();
                        }
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                }
            });
            c.start();
            members.add(c);
        }
        while ((got.get("A").size() < expected || got.get("B").size() < expected) && remainingMs() > 1500) {
            Thread.sleep(100);
        }
        Thread.sleep(1000);
        for (DefaultMQPushConsumer c : members) c.shutdown();
        for (String member : got.keySet()) say("CONSUMED " + member + " " + got.get(member).size());
        say("DUPLICATES " + duplicates.get());
        boolean ok = got.get("A").size() == expected && got.get("B").size() == expected && duplicates.get() == 0;
        finish(ok, "each member must consume " + expected + " messages once");
    }
}
