//! The client's socket on tokio (zk-curator's `tokio-runtime.patch`).
//!
//! The connection code reads and writes through the `futures::io` traits;
//! this is a tokio `TcpStream` behind them, so that the socket is driven by
//! the tokio runtime the client runs on (its reactor and its clock) rather
//! than by a reactor thread of its own.

use std::io::{IoSlice, Result};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::io::{AsyncRead, AsyncWrite};
use tokio::io::{AsyncRead as _, AsyncWrite as _, ReadBuf};

/// A tokio TCP stream, readable and writable through `futures::io`.
#[derive(Debug)]
pub struct TcpStream(tokio::net::TcpStream);

impl TcpStream {
    /// Resolves `host` and connects to the first address that accepts.
    pub async fn connect(addr: (&str, u16)) -> Result<TcpStream> {
        tokio::net::TcpStream::connect(addr).await.map(TcpStream)
    }

    pub fn set_nodelay(&self, nodelay: bool) -> Result<()> {
        self.0.set_nodelay(nodelay)
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        ready!(Pin::new(&mut self.get_mut().0).poll_read(cx, &mut buf))?;
        Poll::Ready(Ok(buf.filled().len()))
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
