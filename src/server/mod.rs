//! The toolsrv namespace as one table of files, authentication, the
//! listener and the idle monitor.
