//! Raw HTTP/1.1 on the browser side of the gateway: write bytes, read until the
//! gateway closes, parse every response. Raw, so that malformed and pipelined
//! input is exactly what the gateway sees.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every exchange ends within this long, or the test fails.
pub(crate) const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// One parsed response.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Writes `raw` and reads until the gateway closes, then parses every response
/// (each must carry Content-Length: the gateway's and the test upstream's do).
pub(crate) async fn exchange(gateway: SocketAddr, raw: &[u8]) -> Result<Vec<Answer>> {
    let mut stream = TcpStream::connect(gateway).await?;
    stream.write_all(raw).await?;
    let mut received = Vec::new();
    tokio::time::timeout(EXCHANGE_TIMEOUT, stream.read_to_end(&mut received))
        .await
        .context("the gateway did not close the connection in time")??;
    parse_responses(&received)
}

pub(crate) fn parse_responses(mut data: &[u8]) -> Result<Vec<Answer>> {
    let mut answers = Vec::new();
    while !data.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(head_len) = response.parse(data)? else {
            bail!(
                "incomplete response head: {:?}",
                String::from_utf8_lossy(data)
            );
        };
        let headers: Vec<(String, String)> = response
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let status = response.code.context("status")?;
        // 304 and 204 have no body (RFC 9112, section 6.3).
        let length: usize = if status == 304 || status == 204 {
            0
        } else {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .context("response without content-length")?
                .1
                .parse()?
        };
        let end = head_len + length;
        if data.len() < end {
            bail!(
                "truncated body: {} of {length} bytes",
                data.len() - head_len
            );
        }
        answers.push(Answer {
            status,
            headers,
            body: data[head_len..end].to_vec(),
        });
        data = &data[end..];
    }
    Ok(answers)
}
