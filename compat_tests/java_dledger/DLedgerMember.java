import io.openmessaging.storage.dledger.DLedgerConfig;
import io.openmessaging.storage.dledger.DLedgerServer;
import io.openmessaging.storage.dledger.MemberState;

/** One member of a DLedger 0.3.1.2 group, Apache's own {@code DLedgerServer}, with the small timings of our
 * tests: {@code GROUP SELF_ID PEERS STORE_BASE_DIR DATA_FILE_SIZE INDEX_FILE_SIZE [MAX_BATCH_PUSH_SIZE]}, pushing
 * in batches of that many bytes when the last is given. Prints
 * {@code STATUS role term leaderId ledgerEndIndex committedIndex} every 50 ms; SIGTERM shuts it down (flushing the
 * store and writing its checkpoint). */
public class DLedgerMember {
    public static void main(String[] args) throws Exception {
        DLedgerConfig config = new DLedgerConfig();
        config.setGroup(args[0]);
        config.setSelfId(args[1]);
        config.setPeers(args[2]);
        config.setStoreBaseDir(args[3]);
        config.setMappedFileSizeForEntryData(Integer.parseInt(args[4]));
        config.setMappedFileSizeForEntryIndex(Integer.parseInt(args[5]));
        config.setHeartBeatTimeIntervalMs(500);
        config.setMaxHeartBeatLeak(3);
        config.setMinVoteIntervalMs(50);
        config.setMaxVoteIntervalMs(150);
        config.setMaxWaitAckTimeMs(1000);
        config.setMaxPushTimeOutMs(300);
        config.setEnableDiskForceClean(false);
        if (args.length > 6) {
            config.setEnableBatchPush(true);
            config.setMaxBatchPushSize(Integer.parseInt(args[6]));
        }
        DLedgerServer server = new DLedgerServer(config);
        server.startup();
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdown));
        while (true) {
            MemberState state = server.getMemberState();
            System.out.println("STATUS " + state.getRole() + " " + state.currTerm() + " " + state.getLeaderId() + " "
                + server.getDLedgerStore().getLedgerEndIndex() + " " + server.getDLedgerStore().getCommittedIndex());
            System.out.flush();
            Thread.sleep(50);
        }
    }
}
