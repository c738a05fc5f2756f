import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * The official Java client sending synchronously, one message after another, until stdin is closed: message i has
 * key RUN-key-i and body "RUN message i". Prints, one line each:
 * SENT i msgId offsetMsgId queueId queueOffset epochMillis (a SEND_OK), ERROR i attempt reason (a failed attempt,
 * retried 200 ms later with the same number), DONE sent (at the end). Usage: FailoverProducer namesrv topic group
 * run.
 */
public class FailoverProducer {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2], run = args[3];
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(3000);
        producer.start();
        final AtomicBoolean closed = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                while (in.readLine() != null) {
                    // the test only closes stdin
                }
            } catch (Exception ignored) {
                // closed
            }
            closed.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        int sent = 0;
        for (int i = 0; !closed.get(); i++) {
            for (int attempt = 0; !closed.get(); attempt++) {
                Message msg = new Message(topic, "TagA", run + "-key-" + i,
                    (run + " message " + i).getBytes(StandardCharsets.UTF_8));
                try {
                    SendResult result = producer.send(msg);
                    if (result.getSendStatus() != SendStatus.SEND_OK) {
                        throw new IllegalStateException("status " + result.getSendStatus());
                    }
                    sent++;
                    System.out.println("SENT " + i + " " + result.getMsgId() + " " + result.getOffsetMsgId() + " "
                        + result.getMessageQueue().getQueueId() + " " + result.getQueueOffset() + " "
                        + System.currentTimeMillis());
                    break;
                } catch (Exception e) {
                    String reason = String.valueOf(e.getMessage()).replace('\n', ' ');
                    System.out.println("ERROR " + i + " " + attempt + " " + reason.substring(0, Math.min(200, reason.length())));
                    Thread.sleep(200);
                }
            }
        }
        System.out.println("DONE " + sent);
        System.out.flush();
        producer.shutdown();
        System.exit(0);
    }
}
