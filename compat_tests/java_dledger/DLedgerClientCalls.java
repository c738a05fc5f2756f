import io.openmessaging.storage.dledger.client.DLedgerClient;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.protocol.AppendEntryResponse;
import io.openmessaging.storage.dledger.protocol.GetEntriesResponse;
import io.openmessaging.storage.dledger.protocol.LeadershipTransferResponse;
import java.nio.charset.StandardCharsets;

/** DLedger 0.3.1.2's own client against a group: {@code GROUP PEERS COUNT [LEADER TERM TRANSFEREE]} appends COUNT
 * bodies ("client-i"), printing {@code APPEND code index pos leaderId} for each, reads them back printing
 * {@code GET code index body}, then, when given, asks LEADER to hand over to TRANSFEREE: {@code TRANSFER code}. */
public class DLedgerClientCalls {
    public static void main(String[] args) {
        DLedgerClient client = new DLedgerClient(args[0], args[1]);
        client.startup();
        int count = Integer.parseInt(args[2]);
        for (int i = 0; i < count; i++) {
            AppendEntryResponse r = client.append(("client-" + i).getBytes(StandardCharsets.UTF_8));
            System.out.println("APPEND " + r.getCode() + " " + r.getIndex() + " " + r.getPos() + " " + r.getLeaderId());
        }
        for (int i = 0; i < count; i++) {
            GetEntriesResponse r = client.get(i);
            DLedgerEntry e = r.getEntries() == null || r.getEntries().isEmpty() ? null : r.getEntries().get(0);
            System.out.println("GET " + r.getCode() + " " + (e == null ? -1 : e.getIndex()) + " "
                + (e == null ? "-" : new String(e.getBody(), StandardCharsets.UTF_8)));
        }
        if (args.length > 3) {
            LeadershipTransferResponse r = client.leadershipTransfer(args[3], args[5], Long.parseLong(args[4]));
            System.out.println("TRANSFER " + r.getCode());
        }
        client.shutdown();
        System.exit(0);
    }
}
