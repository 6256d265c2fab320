//! Server-sent events, read incrementally from a response body.

use axum::body::Body;
use http_body_util::BodyExt;

use super::TestError;

/// One event: its id, if any, and its data lines joined (empty for a priming event).
#[derive(Debug, PartialEq)]
pub(super) struct Event {
    pub(super) id: Option<String>,
    pub(super) data: String,
}

/// The events of one SSE body, as they arrive.
pub(super) struct Events {
    body: Body,
    /// Bytes received and not yet parsed (carriage returns removed).
    pending: Vec<u8>,
}

impl Events {
    pub(super) fn new(body: Body) -> Self {
        Self {
            body,
            pending: Vec::new(),
        }
    }

    /// The next event, or `None` when the stream ends (an unterminated last event is
    /// dropped, as the SSE spec says).
    pub(super) async fn next(&mut self) -> Result<Option<Event>, TestError> {
        loop {
            if let Some(end) = self.pending.windows(2).position(|pair| pair == b"\n\n") {
                let block: Vec<u8> = self.pending.drain(..end + 2).collect();
                let text = std::str::from_utf8(&block[..end])
                    .map_err(|_| TestError::Protocol("an SSE event is not UTF-8".into()))?;
                if let Some(event) = parse(text) {
                    return Ok(Some(event));
                }
                continue;
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(error)) => return Err(TestError::Body(error)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.pending
                            .extend(data.iter().copied().filter(|&b| b != b'\r'));
                    }
                }
            }
        }
    }
}

/// One event block; `None` for a block of comments only (keep-alives) or without fields.
fn parse(block: &str) -> Option<Event> {
    let mut id = None;
    let mut data: Option<String> = None;
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.to_owned()),
            "data" => match &mut data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    if id.is_none() && data.is_none() {
        return None;
    }
    Some(Event {
        id,
        data: data.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn events_split_across_chunks_and_comments_are_skipped() {
        let (mut sender, channel) =
            http_body_util::channel::Channel::<bytes::Bytes, axum::Error>::new(4);
        let mut events = Events::new(Body::new(channel));
        for chunk in [
            ": keep-alive\n\nid: 1\r\ndata:\r\n\r\nid: 2\ndata: {\"a\"",
            ":1}\ndata: x\n\n",
            "data: cut",
        ] {
            sender
                .send_data(bytes::Bytes::from_static(chunk.as_bytes()))
                .await
                .expect("sent");
        }
        drop(sender);
        assert_eq!(
            events.next().await.ok().flatten(),
            Some(Event {
                id: Some("1".into()),
                data: String::new()
            })
        );
        assert_eq!(
            events.next().await.ok().flatten(),
            Some(Event {
                id: Some("2".into()),
                data: "{\"a\":1}\nx".into()
            })
        );
        assert_eq!(events.next().await.ok().flatten(), None);
    }
}
