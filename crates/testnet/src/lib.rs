//! (being written: network namespace topologies for live tests)
