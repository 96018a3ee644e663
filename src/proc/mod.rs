//! The process table: synchronous and background calls, their output,
//! wait/stat/ctl, and garbage collection of finished processes.
