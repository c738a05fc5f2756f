import com.alibaba.fastjson.JSON;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.entry.DLedgerEntryCoder;
import io.openmessaging.storage.dledger.protocol.PushEntryRequest;
import io.openmessaging.storage.dledger.protocol.VoteRequest;
import io.openmessaging.storage.dledger.protocol.VoteResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/** Prints, one per line, what DLedger 0.3.1.2 writes for fixed values: an entry's data-file and index-file
 * records (hex) and the JSON bodies of a vote request, a vote response and a push of that entry. */
public class DLedgerCodec {
    private static String hex(ByteBuffer b) {
        StringBuilder sb = new StringBuilder();
        for (int i = b.position(); i < b.limit(); i++) {
            sb.append(String.format("%02x", b.get(i)));
        }
        return sb.toString();
    }

    public static void main(String[] args) {
        DLedgerEntry entry = new DLedgerEntry();
        entry.setMagic(1);
        entry.setIndex(5);
        entry.setTerm(2);
        entry.setPos(480);
        entry.setChannel(7);
        entry.setBody("héllo".getBytes(StandardCharsets.UTF_8));
        ByteBuffer data = ByteBuffer.allocate(256);
        DLedgerEntryCoder.encode(entry, data);
        System.out.println(hex(data));
        ByteBuffer index = ByteBuffer.allocate(32);
        DLedgerEntryCoder.encodeIndex(entry.getPos(), entry.getSize(), entry.getMagic(), entry.getIndex(), entry.getTerm(), index);
        System.out.println(hex(index));

        VoteRequest vote = new VoteRequest();
        vote.setGroup("RaftNode00");
        vote.setIds("n0", "n1", null);
        vote.setTerm(3);
        vote.setLedgerEndIndex(7);
        vote.setLedgerEndTerm(2);
        System.out.println(new String(JSON.toJSONBytes(vote), StandardCharsets.UTF_8));
        VoteResponse answer = new VoteResponse(vote);
        answer.setVoteResult(VoteResponse.RESULT.REJECT_ALREADY_VOTED);
        System.out.println(new String(JSON.toJSONBytes(answer), StandardCharsets.UTF_8));

        PushEntryRequest push = new PushEntryRequest();
        push.setGroup("RaftNode00");
        push.setIds("n0", "n1", "n0");
        push.setTerm(3);
        push.setCommitIndex(4);
        push.addEntry(entry);
        System.out.println(new String(JSON.toJSONBytes(push), StandardCharsets.UTF_8));
    }
}
