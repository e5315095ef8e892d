//! The in-memory store passes the conformance suite.
baton_core::conformance_tests!(baton_core::conformance::MemoryHarness);
