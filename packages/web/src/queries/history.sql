/* @name HistoryStatus */
select admin.history_status() as "status!";
