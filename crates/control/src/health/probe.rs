//! One health check, run to completion within its timeout: a TCP connect, or an HTTP/1.1 GET whose
//! status code and (optionally) body are checked.
//!
//! The whole check — connect, send, receive — shares one deadline, so a check never takes longer
//! than `timeout` however the server dribbles its answer. Responses are read up to
//! [`MAX_HEAD`] bytes of status line and headers and [`MAX_BODY`] bytes of body; a body match looks
//! only at that prefix (a health endpoint's answer is small; a larger one is not read to its end).
//! Bodies framed by `Content-Length`, by `Transfer-Encoding: chunked` or by the connection closing
//! are all understood; the request says `Connection: close`.

use super::HealthKind;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Most bytes of status line and headers read from a health endpoint.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most body bytes read (and searched for the expected substring).
pub const MAX_BODY: usize = 64 * 1024;

/// Run one check of `kind` against `target`. `Ok` carries a short description of the success
/// ("tcp connect ok", "http 200"), `Err` the reason of the failure, naming the target.
pub fn check(target: SocketAddr, kind: &HealthKind, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    match kind {
        HealthKind::Tcp => connect(target, timeout).map(|_| "tcp connect ok".to_string()),
        HealthKind::Http { path, status, body } => {
            http(target, path, *status, body.as_deref(), timeout, deadline)
        }
    }
}

fn connect(target: SocketAddr, timeout: Duration) -> Result<TcpStream, String> {
    TcpStream::connect_timeout(&target, timeout).map_err(|e| {
        if is_timeout(&e) {
            format!(
                "tcp connect {target}: timed out after {} ms",
                timeout.as_millis()
            )
        } else {
            format!("tcp connect {target}: {e}")
        }
    })
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// Time left before `deadline`, or the timeout error.
fn left(deadline: Instant, timeout: Duration, target: SocketAddr) -> Result<Duration, String> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(format!(
            "http {target}: timed out after {} ms",
            timeout.as_millis()
        ))
    } else {
        Ok(d)
    }
}

fn http(
    target: SocketAddr,
    path: &str,
    want_status: u16,
    want_body: Option<&str>,
    timeout: Duration,
    deadline: Instant,
) -> Result<String, String> {
    let mut s = connect(target, timeout)?;
    let _ = s.set_nodelay(true);
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: flowplane-health/{}\r\n\
         Accept: */*\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    let io_err = |what: &str, e: io::Error| {
        if is_timeout(&e) {
            format!(
                "http {target}: timed out after {} ms ({what})",
                timeout.as_millis()
            )
        } else {
            format!("http {target}: {what}: {e}")
        }
    };
    s.set_write_timeout(Some(left(deadline, timeout, target)?))
        .map_err(|e| io_err("send", e))?;
    s.write_all(req.as_bytes()).map_err(|e| io_err("send", e))?;

    // Status line and headers.
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(format!(
                "http {target}: response headers exceed {MAX_HEAD} bytes"
            ));
        }
        s.set_read_timeout(Some(left(deadline, timeout, target)?))
            .map_err(|e| io_err("receive", e))?;
        let n = s.read(&mut chunk).map_err(|e| io_err("receive", e))?;
        if n == 0 {
            return Err(format!(
                "http {target}: connection closed before a complete response header ({} bytes)",
                buf.len()
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let code = parse_status_line(status_line)
        .ok_or_else(|| format!("http {target}: malformed status line {status_line:?}"))?;
    if code != want_status {
        return Err(format!(
            "http {target}: status {code} for GET {path}, want {want_status}"
        ));
    }
    let Some(want) = want_body else {
        return Ok(format!("http {code}"));
    };

    // Body framing.
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
        }
    }
    let mut raw = buf.split_off(head_end);
    let body = loop {
        if chunked {
            match decode_chunked(&raw) {
                Chunked::Done(b) => break b,
                Chunked::Bad => return Err(format!("http {target}: malformed chunked body")),
                Chunked::Partial(b) if b.len() >= MAX_BODY || raw.len() >= MAX_BODY * 2 => break b,
                Chunked::Partial(_) => {}
            }
        } else if let Some(n) = content_length {
            if raw.len() >= n.min(MAX_BODY) {
                raw.truncate(n.min(MAX_BODY));
                break raw;
            }
        } else if raw.len() >= MAX_BODY {
            raw.truncate(MAX_BODY);
            break raw;
        }
        s.set_read_timeout(Some(left(deadline, timeout, target)?))
            .map_err(|e| io_err("receive body", e))?;
        let n = s.read(&mut chunk).map_err(|e| io_err("receive body", e))?;
        if n == 0 {
            // The server closed: what we have is the body (a truncated Content-Length or chunked
            // body is still searched; the server chose to send no more).
            break if chunked {
                match decode_chunked(&raw) {
                    Chunked::Done(b) | Chunked::Partial(b) => b,
                    Chunked::Bad => return Err(format!("http {target}: malformed chunked body")),
                }
            } else {
                raw
            };
        }
        raw.extend_from_slice(&chunk[..n]);
    };
    if find(&body, want.as_bytes()).is_some() {
        Ok(format!("http {code}, body matches"))
    } else {
        Err(format!(
            "http {target}: body of GET {path} ({} bytes read) does not contain {want:?}",
            body.len()
        ))
    }
}

/// `HTTP/1.x NNN reason` → NNN.
fn parse_status_line(line: &str) -> Option<u16> {
    let mut parts = line.splitn(3, ' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    code.parse().ok()
}

/// Position of `needle` in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

enum Chunked {
    /// The last chunk was seen: the whole body.
    Done(Vec<u8>),
    /// The body so far.
    Partial(Vec<u8>),
    /// Not chunked encoding.
    Bad,
}

/// Decode a chunked body (RFC 9112 §7.1) as far as `raw` goes. Trailers are ignored.
fn decode_chunked(raw: &[u8]) -> Chunked {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let Some(eol) = find(&raw[pos..], b"\r\n") else {
            return if raw.len() - pos > 64 {
                Chunked::Bad
            } else {
                Chunked::Partial(out)
            };
        };
        let line = &raw[pos..pos + eol];
        let size_text = line.split(|&b| b == b';').next().unwrap_or_default();
        let Ok(size_text) = std::str::from_utf8(size_text) else {
            return Chunked::Bad;
        };
        let Ok(size) = usize::from_str_radix(size_text.trim(), 16) else {
            return Chunked::Bad;
        };
        pos += eol + 2;
        if size == 0 {
            return Chunked::Done(out);
        }
        let end = pos.saturating_add(size);
        if end > raw.len() {
            out.extend_from_slice(&raw[pos..]);
            return Chunked::Partial(out);
        }
        out.extend_from_slice(&raw[pos..end]);
        if out.len() >= MAX_BODY {
            return Chunked::Done(out);
        }
        pos = end;
        if raw.len() < pos + 2 {
            return Chunked::Partial(out);
        }
        if &raw[pos..pos + 2] != b"\r\n" {
            return Chunked::Bad;
        }
        pos += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A one-shot HTTP server answering each connection with `response`, split into pieces sent
    /// with small pauses (to exercise partial reads).
    fn serve(response: Vec<Vec<u8>>, connections: usize) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        thread::spawn(move || {
            for _ in 0..connections {
                let Ok((mut s, _)) = l.accept() else { return };
                let mut req = Vec::new();
                let mut b = [0u8; 1024];
                while find(&req, b"\r\n\r\n").is_none() {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&req);
                assert!(text.starts_with("GET /healthz HTTP/1.1\r\n"), "{text}");
                assert!(text.contains("\r\nHost: 127.0.0.1:"), "{text}");
                assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
                for piece in &response {
                    let _ = s.write_all(piece);
                    thread::sleep(Duration::from_millis(2));
                }
            }
        });
        addr
    }

    fn http_kind(status: u16, body: Option<&str>) -> HealthKind {
        HealthKind::Http {
            path: "/healthz".into(),
            status,
            body: body.map(str::to_string),
        }
    }

    const T: Duration = Duration::from_secs(2);

    #[test]
    fn http_status_and_body() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nall ok\n".to_vec();
        let a = serve(vec![ok.clone()], 3);
        assert_eq!(check(a, &http_kind(200, None), T).unwrap(), "http 200");
        assert!(check(a, &http_kind(200, Some("ok")), T).is_ok());
        let e = check(a, &http_kind(200, Some("ready")), T).unwrap_err();
        assert!(e.contains("does not contain \"ready\""), "{e}");

        let a = serve(
            vec![b"HTTP/1.0 500 Internal Server Error\r\n\r\nboom".to_vec()],
            1,
        );
        let e = check(a, &http_kind(200, None), T).unwrap_err();
        assert!(e.contains("status 500") && e.contains("want 200"), "{e}");
    }

    #[test]
    fn http_body_framings() {
        // Chunked, delivered in pieces, the match spanning a chunk boundary.
        let a = serve(
            vec![
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\nheal".to_vec(),
                b"thy\r\n3\r\n ok\r\n0\r\n\r\n".to_vec(),
            ],
            1,
        );
        let r = check(a, &http_kind(200, Some("healthy ok")), T);
        assert_eq!(r, Ok("http 200, body matches".to_string()));
        // Close-delimited (no length).
        let a = serve(vec![b"HTTP/1.0 200 OK\r\n\r\nserving".to_vec()], 1);
        assert!(check(a, &http_kind(200, Some("serving")), T).is_ok());
        // Garbage instead of HTTP.
        let a = serve(vec![b"SSH-2.0-OpenSSH\r\n\r\n".to_vec()], 1);
        let e = check(a, &http_kind(200, None), T).unwrap_err();
        assert!(e.contains("malformed status line"), "{e}");
    }

    #[test]
    fn http_timeout_is_bounded() {
        // Accepts (the kernel does, via the backlog) but never answers.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let t0 = Instant::now();
        let e = check(a, &http_kind(200, None), Duration::from_millis(150)).unwrap_err();
        let took = t0.elapsed();
        assert!(e.contains("timed out after 150 ms"), "{e}");
        assert!(took >= Duration::from_millis(140), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        drop(l);
    }

    #[test]
    fn tcp_connect() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        assert_eq!(check(a, &HealthKind::Tcp, T).unwrap(), "tcp connect ok");
        drop(l);
        let e = check(a, &HealthKind::Tcp, T).unwrap_err();
        assert!(e.starts_with(&format!("tcp connect {a}: ")), "{e}");
    }

    #[test]
    fn chunked_decoder() {
        assert!(
            matches!(decode_chunked(b"3\r\nabc\r\n0\r\n\r\n"), Chunked::Done(b) if b == b"abc")
        );
        assert!(
            matches!(decode_chunked(b"3;ext=1\r\nabc\r\n"), Chunked::Partial(b) if b == b"abc")
        );
        assert!(matches!(decode_chunked(b"zz\r\nabc\r\n"), Chunked::Bad));
        assert!(matches!(decode_chunked(b"3\r\nabcXY"), Chunked::Bad));
        assert_eq!(parse_status_line("HTTP/1.1 204 No Content"), Some(204));
        assert_eq!(parse_status_line("HTTP/2 200"), None);
        assert_eq!(parse_status_line("HTTP/1.1 20x"), None);
    }
}
