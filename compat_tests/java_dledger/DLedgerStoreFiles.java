import io.openmessaging.storage.dledger.DLedgerConfig;
import io.openmessaging.storage.dledger.MemberState;
import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.store.file.DLedgerMmapFileStore;
import java.nio.charset.StandardCharsets;

/** DLedger 0.3.1.2's own file store on a directory: {@code write BASE DATA_SIZE INDEX_SIZE COUNT TERM} appends
 * COUNT entries as leader of TERM and commits all but the last; {@code read BASE DATA_SIZE INDEX_SIZE} recovers
 * the directory and prints begin, end, end term and committed index, then one line per entry. */
public class DLedgerStoreFiles {
    private static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) {
            sb.append(String.format("%02x", x));
        }
        return sb.toString();
    }

    public static void main(String[] args) {
        DLedgerConfig config = new DLedgerConfig();
        config.setStoreBaseDir(args[1]);
        config.setGroup("g0");
        config.setSelfId("n0");
        config.setPeers("n0-127.0.0.1:1");
        config.setMappedFileSizeForEntryData(Integer.parseInt(args[2]));
        config.setMappedFileSizeForEntryIndex(Integer.parseInt(args[3]));
        MemberState state = new MemberState(config);
        DLedgerMmapFileStore store = new DLedgerMmapFileStore(config, state);
        store.setEnableCleanSpaceService(false);
        store.startup();
        if (args[0].equals("write")) {
            long term = Long.parseLong(args[5]);
            state.setCurrTermForTest(term);
            state.changeToLeader(term);
            int count = Integer.parseInt(args[4]);
            for (int i = 0; i < count; i++) {
                DLedgerEntry entry = new DLedgerEntry();
                entry.setBody(("java-" + i + "-").repeat(1 + i % 3).getBytes(StandardCharsets.UTF_8));
                store.appendAsLeader(entry);
            }
            store.updateCommittedIndex(term, count - 2);
        } else {
            System.out.println(store.getLedgerBeginIndex() + " " + store.getLedgerEndIndex() + " "
                + store.getLedgerEndTerm() + " " + store.getCommittedIndex());
            for (long i = store.getLedgerBeginIndex(); i >= 0 && i <= store.getLedgerEndIndex(); i++) {
                DLedgerEntry e = store.get(i);
                System.out.println(e.getIndex() + " " + e.getTerm() + " " + e.getPos() + " " + hex(e.getBody()));
            }
        }
        store.shutdown();
        System.exit(0);
    }
}
