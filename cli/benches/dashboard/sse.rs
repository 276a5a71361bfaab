//! The dashboard's `/events`, read as a browser's `EventSource` reads it,
//! by a plain HTTP/1.1 client over a `TcpStream`: the response's chunks
//! decoded, its server-sent events split on blank lines. A task reads all
//! the time (a reader that stopped would leave the server's socket full and
//! time the backlog); each message is handed over with the instant its last
//! byte was read, before anything parses it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::BoxError;

/// The largest response head the client takes.
const HEAD_LIMIT: usize = 64 * 1024;

/// One `view` message: its data and when its last byte was read.
#[derive(Debug)]
struct Message {
    at: Instant,
    data: String,
}

/// A message a wait was for: when it was read, and its size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    pub(crate) at: Instant,
    pub(crate) bytes: usize,
}

/// An open `/events` stream.
#[derive(Debug)]
pub(crate) struct Events {
    messages: mpsc::UnboundedReceiver<Message>,
    reader: JoinHandle<()>,
    received: Arc<AtomicUsize>,
    largest: Arc<AtomicUsize>,
}

impl Events {
    /// `GET /events` on `address` (`host:port`); the reader runs from here.
    pub(crate) async fn open(address: &str) -> Result<Events, BoxError> {
        let mut stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let request = format!(
            "GET /events HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        let head_end = loop {
            if let Some(end) = find(&raw, b"\r\n\r\n", 0) {
                break end;
            }
            if raw.len() > HEAD_LIMIT {
                return Err("the /events response head is too long".into());
            }
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Err("/events closed before its head".into());
            }
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
        let status = head.lines().next().unwrap_or_default().to_owned();
        if !status.contains(" 200 ") {
            return Err(format!("/events answered {status:?}").into());
        }
        let chunked = head
            .lines()
            .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
        raw.drain(..head_end + 4);
        let (tx, messages) = mpsc::unbounded_channel();
        let received = Arc::new(AtomicUsize::new(0));
        let largest = Arc::new(AtomicUsize::new(0));
        let reader = tokio::spawn(read(
            stream,
            raw,
            chunked,
            tx,
            received.clone(),
            largest.clone(),
        ));
        Ok(Events {
            messages,
            reader,
            received,
            largest,
        })
    }

    /// Waits (at most `limit`) for a message whose view `check` accepts;
    /// messages before it are read and passed over.
    pub(crate) async fn wait_for(
        &mut self,
        limit: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Result<Seen, BoxError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let message = tokio::time::timeout_at(deadline, self.messages.recv())
                .await
                .map_err(|_| format!("no such /events message within {limit:?}"))?
                .ok_or("/events ended")?;
            let view: Value = serde_json::from_str(&message.data)?;
            if check(&view) {
                return Ok(Seen {
                    at: message.at,
                    bytes: message.data.len(),
                });
            }
        }
    }

    /// `view` messages read so far.
    pub(crate) fn received(&self) -> usize {
        self.received.load(Ordering::Relaxed)
    }

    /// The largest message's data, in bytes.
    pub(crate) fn largest(&self) -> usize {
        self.largest.load(Ordering::Relaxed)
    }

    /// Stops the reader (its connection closes with it).
    pub(crate) fn close(self) {
        self.reader.abort();
    }
}

/// `GET path` on `address`, read to its end: how long it took and the
/// body's size (a view's JSON made once, with no event stream around it).
pub(crate) async fn timed_get(address: &str, path: &str) -> Result<(Duration, usize), BoxError> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let took = started.elapsed();
    let body = find(&response, b"\r\n\r\n", 0).map_or(0, |end| response.len() - end - 4);
    Ok((took, body))
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| at + from)
}

/// Where the chunked decoder is.
enum Chunk {
    /// At a chunk-size line.
    Size,
    /// Inside a chunk: this many bytes still to come.
    Data(usize),
    /// After a chunk's data: its CRLF.
    End,
}

/// Reads the body to its end (or an error), decoding chunks when
/// `chunked`, and hands over each `view` message.
async fn read(
    mut stream: TcpStream,
    mut raw: Vec<u8>,
    chunked: bool,
    tx: mpsc::UnboundedSender<Message>,
    received: Arc<AtomicUsize>,
    largest: Arc<AtomicUsize>,
) {
    let mut body: Vec<u8> = Vec::new();
    let mut scanned: usize = 0;
    let mut state = Chunk::Size;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        // Decode what came in.
        if chunked {
            loop {
                match state {
                    Chunk::Size => {
                        let Some(end) = find(&raw, b"\r\n", 0) else {
                            break;
                        };
                        let line = String::from_utf8_lossy(&raw[..end]).into_owned();
                        let hex = line.split(';').next().unwrap_or_default().trim();
                        let Ok(size) = usize::from_str_radix(hex, 16) else {
                            return;
                        };
                        raw.drain(..end + 2);
                        if size == 0 {
                            return;
                        }
                        state = Chunk::Data(size);
                    }
                    Chunk::Data(left) => {
                        if raw.is_empty() {
                            break;
                        }
                        let take = left.min(raw.len());
                        body.extend(raw.drain(..take));
                        state = if take == left {
                            Chunk::End
                        } else {
                            Chunk::Data(left - take)
                        };
                    }
                    Chunk::End => {
                        if raw.len() < 2 {
                            break;
                        }
                        raw.drain(..2);
                        state = Chunk::Size;
                    }
                }
            }
        } else {
            body.append(&mut raw);
        }
        // Hand over every whole event.
        let at = Instant::now();
        while let Some(end) = find(&body, b"\n\n", scanned.saturating_sub(1)) {
            let event = String::from_utf8_lossy(&body[..end]).into_owned();
            body.drain(..end + 2);
            scanned = 0;
            let mut name = "message";
            let mut data: Vec<&str> = Vec::new();
            for line in event.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    name = value.strip_prefix(' ').unwrap_or(value);
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value));
                }
            }
            if !(name == "view" || name == "change") || data.is_empty() {
                continue;
            }
            let data = data.join("\n");
            received.fetch_add(1, Ordering::Relaxed);
            largest.fetch_max(data.len(), Ordering::Relaxed);
            if tx.send(Message { at, data }).is_err() {
                return;
            }
        }
        scanned = body.len();
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
}
