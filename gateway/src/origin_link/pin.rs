//! Stream pinning: which data stream of the association a browser flow uses.
//! Each flow is pinned to one stream for its life (so its responses stay in
//! order behind each other and a loss on another stream never stalls it), the
//! least loaded stream first. No I/O, so it is tested deterministically.

/// Browser flows pinned per data stream. Streams are numbered from 1; index
/// `s - 1` holds stream `s`.
#[derive(Debug, Clone)]
pub(crate) struct PinTable {
    counts: Vec<u32>,
}

impl PinTable {
    /// A table for data streams `1..=streams` (at least one).
    pub(crate) fn new(streams: u16) -> Self {
        Self {
            counts: vec![0; usize::from(streams.max(1))],
        }
    }

    /// Pins one flow among streams `1..=usable` (clamped to the table): the one
    /// with the fewest pinned flows, the lowest number on ties.
    pub(crate) fn pin(&mut self, usable: u16) -> u16 {
        let usable = usize::from(usable).clamp(1, self.counts.len());
        let (index, count) = self.counts[..usable]
            .iter_mut()
            .enumerate()
            .min_by_key(|(index, count)| (**count, *index))
            .expect("at least one stream");
        *count += 1;
        index as u16 + 1
    }

    /// Releases one flow pinned to `stream`.
    pub(crate) fn unpin(&mut self, stream: u16) {
        if let Some(count) = usize::from(stream)
            .checked_sub(1)
            .and_then(|i| self.counts.get_mut(i))
        {
            *count = count.saturating_sub(1);
        }
    }

    /// Flows pinned to `stream`.
    pub(crate) fn pinned(&self, stream: u16) -> u32 {
        usize::from(stream)
            .checked_sub(1)
            .and_then(|i| self.counts.get(i))
            .copied()
            .unwrap_or(0)
    }
}

/// The data stream a pin uses on an association with `data_streams` streams. A
/// pin outlives associations; if a later one negotiated fewer streams, pins fold
/// onto the ones it has.
pub(crate) fn stream_for(pinned: u16, data_streams: u16) -> u16 {
    let n = data_streams.max(1);
    (pinned.max(1) - 1) % n + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_go_to_the_least_loaded_stream_lowest_first() {
        let mut t = PinTable::new(3);
        assert_eq!([t.pin(3), t.pin(3), t.pin(3), t.pin(3)], [1, 2, 3, 1]);
        t.unpin(2);
        assert_eq!(t.pin(3), 2, "the freed stream is the least loaded");
        t.unpin(1);
        t.unpin(1);
        assert_eq!(t.pinned(1), 0);
        assert_eq!(t.pin(3), 1);
        // Only the first `usable` streams are candidates.
        assert_eq!(t.pin(1), 1);
        assert_eq!(t.pinned(1), 2);
        // Unknown streams and extra unpins change nothing.
        t.unpin(0);
        t.unpin(9);
        t.unpin(3);
        t.unpin(3);
        assert_eq!(t.pinned(3), 0);
    }

    #[test]
    fn pins_fold_onto_fewer_streams() {
        assert_eq!(stream_for(1, 4), 1);
        assert_eq!(stream_for(4, 4), 4);
        assert_eq!(stream_for(5, 4), 1);
        assert_eq!(stream_for(31, 8), 7);
        assert_eq!(stream_for(3, 0), 1);
    }
}
