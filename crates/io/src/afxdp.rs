//! AF_XDP port (being written).
