"""What the master keeps: the records, the errors a store call raises, the store's interface
and the pure rules a progress report meets. The SQL implementation is in master/store/sql."""
