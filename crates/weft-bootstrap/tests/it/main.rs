//! Integration tests of weft-bootstrap over loopback: ranks as threads, ranks as processes, and
//! the ways a job goes wrong. Every test uses short timeouts, and none needs a GPU.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod failures;
mod processes;
mod threads;
