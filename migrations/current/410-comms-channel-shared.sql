set local lock_timeout = '5s';
-- The email and SMS processes keep what differs; what they shared moves to comms/channel.sql.
--!include comms/channel.sql
--!include comms/email.sql
--!include comms/sms.sql
