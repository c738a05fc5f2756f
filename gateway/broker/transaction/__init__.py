"""Transactional messages: half and op queues, commit/rollback, and the check-back of unresolved halves."""
