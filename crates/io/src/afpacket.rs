//! AF_PACKET port (being written).
