//! The overlapped handover: a new process of an application takes over from the one running,
//! while that one keeps forwarding until the last moment.
//!
//! A restart through the state directory (stop, write the state, start, read it) leaves the
//! interfaces unserved for as long as the old process takes to export its state and the new one
//! to start, open its ports and import it: about half a second per million connection entries.
//! The overlapped handover moves all of that before the cut-over:
//!
//! ```text
//! successor                               predecessor (forwarding all along until ✂)
//! connect <state dir>/handover.sock ───►  accept (its handover thread)
//! hello "flowplane-handover 1 <app>" ───►
//!                                    ◄─── ok
//!                                    ◄─── checkpoint: its state, copied while the workers
//!                                         forward (the application's bytes)
//! open the ports holding (AF_PACKET: a filter drops every frame), make the stages, fill
//! them with the checkpoint
//! cut ──────────────────────────────────► ✂ stop the workers; the delta: what was written
//!                                    ◄─── since the checkpoint (with the wall-clock ms of the stop)
//! MAINPID= to the service manager; done ─►
//! put the delta into the stages       ◄─── AF_XDP (asked for in the cut): the ports, open
//!                                          (their descriptors with SCM_RIGHTS); else close them
//!                                    ◄─── released
//! AF_PACKET: release the held ports; AF_XDP: take the ports over (or, when they were closed,
//! open them now); start the workers                      wait for done, exit
//! ```
//!
//! The forwarding gap is the delta (stop, export, transfer, import) plus releasing or taking
//! over the ports, independent of how many entries the checkpoint carried. Frames that reach
//! the predecessor's AF_PACKET sockets after it stopped are not forwarded (a TCP sender
//! retransmits them); AF_XDP frames wait on the rx rings the successor takes over. No frame is
//! forwarded twice.
//!
//! Failures lose nothing: a predecessor that refuses (another application, another protocol
//! version) or stops answering before the cut-over keeps running, and the successor exits with
//! the reason; a successor that disappears after asking for the cut-over leaves the predecessor
//! to keep its state the other way (the state file for the next start) and exit.
//!
//! Frames on the socket: a tag byte, a little-endian `u64` length, the payload. The cut request's
//! payload names the port driver whose ports the successor would take over (empty: none); a
//! predecessor that does not know the request ignores it and closes its ports, so both ends of
//! either release work together.

use anyhow::{anyhow, bail, Context as _, Result};
use fp_engine::live::Handoff;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The protocol's name and version, sent first by the successor.
const HELLO: &str = "flowplane-handover 1";
const TAG_HELLO: u8 = b'H';
const TAG_OK: u8 = b'K';
const TAG_REFUSE: u8 = b'E';
const TAG_CHECKPOINT: u8 = b'C';
const TAG_CUT: u8 = b'X';
const TAG_DELTA: u8 = b'D';
const TAG_RELEASED: u8 = b'Z';
const TAG_DONE: u8 = b'A';
const TAG_PORTS: u8 = b'P';
/// Larger checkpoints and deltas are refused (a damaged stream, not a state).
const MAX_FRAME: u64 = 64 << 30;
/// Larger frames of the other kinds are refused.
const MAX_SMALL: u64 = 64 << 10;

/// How long either side waits for the other's next step before it gives up: the successor fills
/// its tables between the checkpoint and the cut-over (seconds per ten million entries).
pub const STEP_WAIT: Duration = Duration::from_secs(600);

/// The state of an application, copied while its workers run: what [`crate::Service::checkpointer`]
/// returns, run on the handover thread.
pub type Checkpointer = Box<dyn FnMut() -> Result<Vec<u8>> + Send>;

fn send(s: &mut UnixStream, tag: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 9];
    head[0] = tag;
    head[1..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    s.write_all(&head)?;
    s.write_all(payload)?;
    s.flush()
}

fn receive(s: &mut UnixStream) -> Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head)?;
    Ok((head[0], payload(s, head)?))
}

/// The payload of the frame whose header is `head`.
fn payload(s: &mut UnixStream, head: [u8; 9]) -> Result<Vec<u8>> {
    let len = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
    let cap = match head[0] {
        TAG_CHECKPOINT | TAG_DELTA | TAG_PORTS => MAX_FRAME,
        _ => MAX_SMALL,
    };
    if len > cap {
        bail!("a frame of {len} bytes: not a handover stream");
    }
    let mut payload = vec![0u8; len as usize];
    s.read_exact(&mut payload)?;
    Ok(payload)
}

/// Like [`receive`], also taking the descriptors that came with the frame.
fn receive_with_fds(s: &mut UnixStream) -> Result<(u8, Vec<u8>, Vec<OwnedFd>)> {
    use std::os::fd::AsFd;
    let mut head = [0u8; 9];
    let (n, fds) = fp_engine::sys::recv_with_fds(s.as_fd(), &mut head)?;
    if n == 0 {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    s.read_exact(&mut head[n..])?;
    Ok((head[0], payload(s, head)?, fds))
}

fn expect(s: &mut UnixStream, tag: u8, what: &str) -> Result<Vec<u8>> {
    match receive(s).with_context(|| format!("waiting for the {what}"))? {
        (t, p) if t == tag => Ok(p),
        (TAG_REFUSE, why) => Err(anyhow!(
            "the running process refused: {}",
            String::from_utf8_lossy(&why)
        )),
        (t, _) => Err(anyhow!("expected the {what}, got frame {:?}", t as char)),
    }
}

/// The successor's side of a handover in progress.
pub struct Successor {
    stream: UnixStream,
    path: PathBuf,
}

/// What the predecessor sent at the cut-over.
#[derive(Debug)]
pub struct Delta {
    /// Wall-clock ms (since the Unix epoch) when its workers stopped.
    pub stopped_ms: u64,
    /// The application's bytes.
    pub bytes: Vec<u8>,
}

impl Successor {
    /// Ask the process listening on `path` (if any) to hand over to this one, as application
    /// `app` on the interfaces `scope` names (a process serving other interfaces refuses).
    /// `Ok(None)`: nobody listens (no socket, or a stale one: no process runs). An error:
    /// someone listens but refused or broke off; it keeps running.
    pub fn connect(path: &Path, app: &str, scope: &str) -> Result<Option<(Successor, Vec<u8>)>> {
        let mut stream = match UnixStream::connect(path) {
            Ok(s) => s,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e).with_context(|| format!("connecting to {}", path.display())),
        };
        stream.set_read_timeout(Some(STEP_WAIT))?;
        stream.set_write_timeout(Some(STEP_WAIT))?;
        send(
            &mut stream,
            TAG_HELLO,
            format!("{HELLO} {app} {scope}").as_bytes(),
        )?;
        expect(&mut stream, TAG_OK, "answer to the handover request")?;
        let checkpoint = expect(&mut stream, TAG_CHECKPOINT, "checkpoint")?;
        Ok(Some((
            Successor {
                stream,
                path: path.to_path_buf(),
            },
            checkpoint,
        )))
    }

    /// The socket this successor talks to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Ask for the cut-over: the predecessor stops forwarding and sends what changed since its
    /// checkpoint. `ports`: the driver whose ports this process would take over rather than
    /// open ([`Successor::ports`]).
    pub fn cut(&mut self, ports: Option<&str>) -> Result<Delta> {
        send(&mut self.stream, TAG_CUT, ports.unwrap_or("").as_bytes())?;
        let p = expect(&mut self.stream, TAG_DELTA, "delta")?;
        if p.len() < 8 {
            bail!("a delta of {} bytes", p.len());
        }
        let stopped_ms = u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
        Ok(Delta {
            stopped_ms,
            bytes: p[8..].to_vec(),
        })
    }

    /// Tell the predecessor this process has taken over (after it told the service manager it
    /// is the main process now): the predecessor may exit.
    pub fn confirm(&mut self) -> std::io::Result<()> {
        send(&mut self.stream, TAG_DONE, &[])
    }

    /// After the delta, when [`Successor::cut`] asked for them: the predecessor's ports, handed
    /// over open; `None` when it closed them instead (they are free to open now).
    pub fn ports(&mut self) -> Result<Option<Handoff>> {
        match receive_with_fds(&mut self.stream) {
            Ok((TAG_PORTS, bytes, fds)) => Ok(Some(Handoff::received(bytes, fds))),
            Ok((TAG_RELEASED, _, _)) => Ok(None),
            Ok((t, _, _)) => Err(anyhow!("expected the ports, got frame {:?}", t as char)),
            Err(e) => match e.downcast_ref::<std::io::Error>() {
                Some(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
                _ => Err(e),
            },
        }
    }

    /// Wait until the predecessor has closed its ports (its XDP program detached, its queues
    /// free to bind). A predecessor that exited without saying so has closed them too.
    pub fn wait_released(&mut self) -> Result<()> {
        match receive(&mut self.stream) {
            Ok((TAG_RELEASED, _)) => Ok(()),
            Ok((t, _)) => Err(anyhow!("expected the release, got frame {:?}", t as char)),
            Err(e) => match e.downcast_ref::<std::io::Error>() {
                Some(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => Ok(()),
                _ => Err(e),
            },
        }
    }
}

/// The predecessor's side: a listener on the state directory's socket, served on its own
/// thread until one successor asks for the cut-over.
pub struct Listener {
    path: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The successor being served, if any: shut down by [`Listener::close`] so the thread does
    /// not wait for it.
    active: std::sync::Arc<std::sync::Mutex<Option<UnixStream>>>,
}

/// A successor waiting for the delta: the predecessor's workers must stop now.
pub struct Cut {
    stream: UnixStream,
    /// The driver whose ports the successor would take over (empty: none).
    ports: String,
}

impl Cut {
    /// The driver whose ports the successor asked to take over ([`Cut::ports`]), if any.
    pub fn wants_ports(&self) -> Option<&str> {
        (!self.ports.is_empty()).then_some(self.ports.as_str())
    }

    /// After the delta: hand the ports over (their description and descriptors; at most
    /// [`fp_engine::sys::MAX_FDS_PER_MESSAGE`] descriptors).
    pub fn ports(&mut self, h: &Handoff) -> std::io::Result<()> {
        use std::os::fd::AsFd;
        let mut frame = Vec::with_capacity(9 + h.bytes.len());
        frame.push(TAG_PORTS);
        frame.extend_from_slice(&(h.bytes.len() as u64).to_le_bytes());
        frame.extend_from_slice(&h.bytes);
        let fds: Vec<_> = h.fds.iter().map(|f| f.as_fd()).collect();
        let n = fp_engine::sys::send_with_fds(self.stream.as_fd(), &frame, &fds)?;
        self.stream.write_all(&frame[n..])?;
        self.stream.flush()
    }

    /// Send the delta (`stopped_ms`: wall-clock ms when the workers stopped).
    pub fn delta(&mut self, stopped_ms: u64, bytes: &[u8]) -> std::io::Result<()> {
        let mut p = Vec::with_capacity(8 + bytes.len());
        p.extend_from_slice(&stopped_ms.to_le_bytes());
        p.extend_from_slice(bytes);
        send(&mut self.stream, TAG_DELTA, &p)
    }

    /// Tell the successor the ports are closed, then wait (at most `wait`) until it confirms it
    /// has taken over ([`Successor::confirm`]) or goes away: a service manager must learn of
    /// its new main process before this one exits.
    pub fn released(mut self, wait: Duration) {
        let _ = send(&mut self.stream, TAG_RELEASED, &[]);
        let _ = self.stream.set_read_timeout(Some(wait));
        let _ = receive(&mut self.stream);
    }
}

impl Listener {
    /// Listen on `path` (a stale socket of a process that no longer runs is replaced) and serve
    /// successors of application `app` on the interfaces `scope` names, on a thread (others
    /// are refused): each gets a checkpoint from `checkpoint`;
    /// the first that asks for the cut-over is handed to `cut` (the control thread's channel),
    /// and the thread ends.
    pub fn start(
        path: &Path,
        app: &'static str,
        scope: String,
        mut checkpoint: Checkpointer,
        cut: impl Fn(Cut) -> bool + Send + 'static,
    ) -> Result<Listener> {
        // A socket file nobody listens on is a crashed predecessor's: take its place. One that
        // answers is a live process of this application: do not steal its successors.
        if UnixStream::connect(path).is_ok() {
            bail!(
                "{}: another process of this application listens there",
                path.display()
            );
        }
        let _ = std::fs::remove_file(path);
        let listener =
            UnixListener::bind(path).with_context(|| format!("listening on {}", path.display()))?;
        listener.set_nonblocking(true)?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let active = std::sync::Arc::new(std::sync::Mutex::new(None::<UnixStream>));
        let serving = active.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fp-{app}-handover"))
            .spawn(move || {
                use std::sync::atomic::Ordering;
                while !stopped.load(Ordering::Acquire) {
                    let stream = match listener.accept() {
                        Ok((s, _)) => s,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                        Err(e) => {
                            fp_control::log(format_args!("handover socket: {e}"));
                            std::thread::sleep(Duration::from_millis(200));
                            continue;
                        }
                    };
                    if let Ok(c) = stream.try_clone() {
                        *serving.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
                    }
                    let served = serve_one(stream, &format!("{app} {scope}"), &mut checkpoint);
                    *serving.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    if stopped.load(Ordering::Acquire) {
                        return;
                    }
                    match served {
                        Ok(Some(c)) => {
                            if cut(c) {
                                return;
                            }
                        }
                        Ok(None) => {}
                        Err(e) => fp_control::log(format_args!("handover: {e:#}")),
                    }
                }
            })
            .context("starting the handover thread")?;
        Ok(Listener {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
            active,
        })
    }

    /// Stop listening and remove the socket.
    pub fn close(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        // A successor being served is cut off (it exits; this process goes on stopping).
        if let Some(s) = self
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.shut();
    }
}

/// One successor of `who` (the application and its interfaces): hello, checkpoint, then wait
/// for the cut-over (`None`: it went away first).
fn serve_one(mut s: UnixStream, who: &str, checkpoint: &mut Checkpointer) -> Result<Option<Cut>> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(STEP_WAIT))?;
    let hello = expect(&mut s, TAG_HELLO, "hello")?;
    let want = format!("{HELLO} {who}");
    if hello != want.as_bytes() {
        let why = format!(
            "this process speaks {want:?}, the newcomer {:?}",
            String::from_utf8_lossy(&hello)
        );
        let _ = send(&mut s, TAG_REFUSE, why.as_bytes());
        bail!("refused a successor: {why}");
    }
    send(&mut s, TAG_OK, &[])?;
    let t0 = std::time::Instant::now();
    let bytes = match checkpoint() {
        Ok(b) => b,
        Err(e) => {
            let _ = send(&mut s, TAG_REFUSE, format!("{e:#}").as_bytes());
            return Err(e.context("taking the checkpoint"));
        }
    };
    send(&mut s, TAG_CHECKPOINT, &bytes)?;
    fp_control::log(format_args!(
        "handover: a successor connected; checkpoint of {} bytes sent ({} ms); waiting for it \
         to ask for the cut-over",
        bytes.len(),
        t0.elapsed().as_millis()
    ));
    s.set_read_timeout(Some(STEP_WAIT))?;
    match receive(&mut s) {
        Ok((TAG_CUT, driver)) => Ok(Some(Cut {
            stream: s,
            ports: String::from_utf8_lossy(&driver).into_owned(),
        })),
        Ok((t, _)) => bail!("expected the cut-over, got frame {:?}", t as char),
        Err(e) => {
            fp_control::log(format_args!(
                "handover: the successor went away before the cut-over ({e:#}); forwarding on"
            ));
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener of application "test" on eth0 whose checkpoint is `state`; the cut-overs it
    /// hands on arrive on the receiver.
    fn listen(path: &Path, state: Vec<u8>) -> (Listener, std::sync::mpsc::Receiver<Cut>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let listener = Listener::start(
            path,
            "test",
            "eth0".into(),
            Box::new(move || Ok(state.clone())),
            move |c| tx.send(c).is_ok(),
        )
        .unwrap();
        (listener, rx)
    }

    #[test]
    fn a_successor_gets_the_checkpoint_then_the_delta_then_the_release() {
        let dir = std::env::temp_dir().join(format!("fp-handover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("handover.sock");
        let (listener, rx) = listen(&path, b"state".to_vec());
        // A second listener on a live socket is refused.
        assert!(Listener::start(
            &path,
            "test",
            "eth0".into(),
            Box::new(|| Ok(vec![])),
            |_| true
        )
        .is_err());
        // Another application, or the same on other interfaces, is refused, and the predecessor
        // keeps listening.
        for (app, scope) in [("other", "eth0"), ("test", "eth1")] {
            let e = Successor::connect(&path, app, scope).err().unwrap();
            assert!(format!("{e:#}").contains("refused"), "{e:#}");
        }
        let (mut succ, cp) = Successor::connect(&path, "test", "eth0").unwrap().unwrap();
        assert_eq!(cp, b"state");
        let predecessor = std::thread::spawn(move || {
            let mut cut = rx.recv().unwrap();
            cut.delta(1234, b"changed").unwrap();
            cut.released(Duration::from_secs(5));
        });
        let d = succ.cut(None).unwrap();
        assert_eq!((d.stopped_ms, d.bytes.as_slice()), (1234, &b"changed"[..]));
        succ.confirm().unwrap();
        succ.wait_released().unwrap();
        predecessor.join().unwrap();
        listener.close();
        assert!(!path.exists());
        // Nobody listens: no handover.
        assert!(Successor::connect(&path, "test", "eth0").unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ports_asked_for_come_with_their_descriptors_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("fp-handover-ports-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("handover.sock");
        let (listener, rx) = listen(&path, vec![]);
        // The predecessor hands over a file it wrote into (a stand-in for a socket).
        let file = dir.join("port");
        std::fs::write(&file, b"frames").unwrap();
        let (mut succ, _) = Successor::connect(&path, "test", "eth0").unwrap().unwrap();
        let f = file.clone();
        let predecessor = std::thread::spawn(move || {
            let mut cut = rx.recv().unwrap();
            assert_eq!(cut.wants_ports(), Some("af_xdp"));
            cut.delta(1, b"").unwrap();
            let h = Handoff::received(
                b"description".to_vec(),
                vec![std::fs::File::open(&f).unwrap().into()],
            );
            cut.ports(&h).unwrap();
            cut.released(Duration::from_secs(5));
        });
        succ.cut(Some("af_xdp")).unwrap();
        succ.confirm().unwrap();
        let h = succ.ports().unwrap().expect("handed over");
        predecessor.join().unwrap();
        assert_eq!(h.bytes, b"description");
        assert_eq!(h.fds.len(), 1);
        let mut got = String::new();
        std::fs::File::from(h.fds.into_iter().next().unwrap())
            .read_to_string(&mut got)
            .unwrap();
        assert_eq!(got, "frames");
        listener.close();

        // A predecessor that closes its ports instead says so: nothing to take over.
        let (listener, rx) = listen(&path, vec![]);
        let (mut succ, _) = Successor::connect(&path, "test", "eth0").unwrap().unwrap();
        let predecessor = std::thread::spawn(move || {
            let mut cut = rx.recv().unwrap();
            cut.delta(1, b"").unwrap();
            cut.released(Duration::from_secs(5));
        });
        succ.cut(Some("af_xdp")).unwrap();
        succ.confirm().unwrap();
        assert!(succ.ports().unwrap().is_none());
        predecessor.join().unwrap();
        listener.close();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
