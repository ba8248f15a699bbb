//! The validity rule of a replicated partition log (`docs/cluster.md`, "Fencing").
//!
//! Every replica, the owner included, runs one [`Fence`] over the partition's stream in
//! order and turns each message into a [`Verdict`] from nothing but the messages before it, so
//! every replica decides alike, and a replica's local log holds one frame per stream position
//! (the message's frame, or a `Skip`). Guarantees (tested below against random streams of
//! several publishers): a frame counts only if it carries the epoch of the last valid claim,
//! names the position just before it as its previous one, and every message since that claim
//! counted (an owner publishes every position of its epoch, so a message of anyone else among
//! them means one of its own did not land where it was meant to: its later ones, even one that
//! lands in place, build on a history the stream does not hold); a claim counts only with a higher
//! epoch than every earlier valid claim, at the position it names; once a claim counts, no
//! message of a lower epoch ever counts again; a chunk group counts only whole, on consecutive
//! positions, in one epoch. Corruption is not decided here: a message whose frame fails its
//! checks halts the partition before it reaches the fence.

pub(crate) use crate::kernel::cluster::SkipReason;

/// What a message says of itself, from its headers (`Amberdb-Epoch`, `Amberdb-Prev`,
/// `Amberdb-Chunk`) and its frame type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message {
    /// Its position in the stream (JetStream's sequence number).
    pub(crate) position: u64,
    /// The epoch its publisher held.
    pub(crate) epoch: u64,
    /// The position its publisher expected just before it.
    pub(crate) prev: u64,
    /// It is a `Claim` (of `epoch`).
    pub(crate) claim: bool,
    /// `Some((i, n))`: chunk `i` of `n` (1-based) of one frame.
    pub(crate) chunk: Option<(u32, u32)>,
}

/// What a replica does with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A whole frame that counts: apply it.
    Apply,
    /// The last chunk of a group that counts: apply the frame its chunks assemble.
    ApplyAssembled {
        /// The position of the group's first chunk.
        first: u64,
    },
    /// A claim that counts: the partition's epoch is now `epoch`.
    Claim { epoch: u64 },
    /// It does not count.
    Skip(SkipReason),
}

/// The state of the rule: the epoch of the last valid claim, the position of the last
/// message, the chunk group being assembled, and whether a message that did not count has
/// landed since the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Fence {
    epoch: u64,
    last: u64,
    /// `(first position, next chunk expected, chunks in all)`.
    open_group: Option<(u64, u32, u32)>,
    /// A message that did not count landed after the last valid claim: no message of its
    /// epoch counts again (`docs/cluster.md`, "Fencing", rule 3).
    interrupted: bool,
}

impl Fence {
    /// The rule as it stands after position `last`, with the chunk group a store holds open
    /// (`held` chunks of `count`, the last of them at `last`) and whether the epoch was
    /// interrupted, as `kernel::cluster::ClusterLog` keeps them across reopens and checkpoints.
    pub(crate) fn resume(
        epoch: u64,
        last: u64,
        open_group: Option<(u32, u32)>,
        interrupted: bool,
    ) -> Fence {
        Fence {
            epoch,
            last,
            open_group: open_group
                .map(|(held, count)| (last + 1 - u64::from(held), held + 1, count)),
            interrupted,
        }
    }

    /// The epoch of the last valid claim (0: never claimed).
    #[cfg(test)]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The position of the last message judged.
    #[cfg(test)]
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// Judges the next message. Messages must come in stream order: a message whose position
    /// is not `last + 1` is the caller's bug, answered `Skip(Position)` without moving on.
    pub(crate) fn judge(&mut self, m: &Message) -> Verdict {
        if m.position != self.last + 1 {
            return Verdict::Skip(SkipReason::Position);
        }
        let verdict = self.decide(m);
        match verdict {
            Verdict::Claim { .. } => self.interrupted = false,
            Verdict::Skip(reason) if reason != SkipReason::Pending => self.interrupted = true,
            _ => {}
        }
        self.last = m.position;
        verdict
    }

    fn decide(&mut self, m: &Message) -> Verdict {
        let in_place = m.prev == self.last;
        // A group is continued only by its next chunk; anything else breaks it, and is then
        // judged on its own.
        if let Some((first, next, n)) = self.open_group {
            self.open_group = None;
            if let Some((i, of)) = m.chunk
                && i > 1
            {
                if of == n && i == next && m.epoch == self.epoch && in_place && !m.claim {
                    if i == n {
                        return Verdict::ApplyAssembled { first };
                    }
                    self.open_group = Some((first, next + 1, n));
                    return Verdict::Skip(SkipReason::Pending);
                }
                return Verdict::Skip(SkipReason::Chunk);
            }
        }
        if m.claim {
            if m.chunk.is_some() || !in_place {
                return Verdict::Skip(if in_place {
                    SkipReason::Chunk
                } else {
                    SkipReason::Position
                });
            }
            if m.epoch <= self.epoch {
                return Verdict::Skip(SkipReason::LostClaim);
            }
            self.epoch = m.epoch;
            return Verdict::Claim { epoch: m.epoch };
        }
        if m.epoch != self.epoch || self.epoch == 0 {
            return Verdict::Skip(SkipReason::Epoch);
        }
        if !in_place {
            return Verdict::Skip(SkipReason::Position);
        }
        // Its epoch's owner lost a position to someone else: fenced until it claims again.
        if self.interrupted {
            return Verdict::Skip(SkipReason::Epoch);
        }
        match m.chunk {
            None => Verdict::Apply,
            Some((1, n)) if n >= 2 => {
                self.open_group = Some((m.position, 2, n));
                Verdict::Skip(SkipReason::Pending)
            }
            Some(_) => Verdict::Skip(SkipReason::Chunk),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(position: u64, epoch: u64) -> Message {
        Message {
            position,
            epoch,
            prev: position - 1,
            claim: false,
            chunk: None,
        }
    }

    fn claim(position: u64, epoch: u64) -> Message {
        Message {
            claim: true,
            ..frame(position, epoch)
        }
    }

    fn chunk(position: u64, epoch: u64, i: u32, n: u32) -> Message {
        Message {
            chunk: Some((i, n)),
            ..frame(position, epoch)
        }
    }

    #[test]
    fn an_owner_writes_after_its_claim_and_a_stale_one_is_fenced_for_good() {
        let mut f = Fence::default();
        assert_eq!(
            f.judge(&frame(1, 0)),
            Verdict::Skip(SkipReason::Epoch),
            "nobody claimed"
        );
        assert_eq!(f.judge(&claim(2, 1)), Verdict::Claim { epoch: 1 });
        assert_eq!(f.judge(&frame(3, 1)), Verdict::Apply);
        assert_eq!(f.judge(&claim(4, 2)), Verdict::Claim { epoch: 2 });
        // The old owner, paused across the claim, publishes what it prepared at 3.
        let stale = Message {
            prev: 3,
            ..frame(5, 1)
        };
        assert_eq!(f.judge(&stale), Verdict::Skip(SkipReason::Epoch));
        // ... and even with the right previous position, its epoch never counts again.
        assert_eq!(f.judge(&frame(6, 1)), Verdict::Skip(SkipReason::Epoch));
        // The new owner's frames for 5 and 6 could not land there: its frame for 7, even in
        // place, builds on them. It claims again.
        assert_eq!(f.judge(&frame(7, 2)), Verdict::Skip(SkipReason::Epoch));
        assert_eq!(f.judge(&claim(8, 3)), Verdict::Claim { epoch: 3 });
        assert_eq!(f.judge(&frame(9, 3)), Verdict::Apply);
        assert_eq!((f.epoch(), f.last()), (3, 9));
    }

    #[test]
    fn the_second_of_two_racing_claims_and_everything_pipelined_behind_an_intruder_skip() {
        let mut f = Fence::resume(3, 10, None, false);
        // Two nodes read epoch 3 at position 10 and both claim epoch 4 there.
        assert_eq!(f.judge(&claim(11, 4)), Verdict::Claim { epoch: 4 });
        let late = Message {
            prev: 10,
            ..claim(12, 4)
        };
        assert_eq!(f.judge(&late), Verdict::Skip(SkipReason::Position));
        // The winner pipelined frames for positions 12, 13, 14. Its frame for 12 could not
        // land there: the late claim holds it. Whether its later frames land one place later
        // (naming the wrong previous position) or exactly in place (JetStream refused the
        // first on its expected last sequence and took the next), none counts: each builds
        // on a frame the stream does not hold.
        assert_eq!(f.judge(&frame(13, 4)), Verdict::Skip(SkipReason::Epoch));
        let shifted = Message {
            prev: 12,
            ..frame(14, 4)
        };
        assert_eq!(f.judge(&shifted), Verdict::Skip(SkipReason::Position));
        assert_eq!(f.judge(&claim(15, 4)), Verdict::Skip(SkipReason::LostClaim));
        // The winner claims again, above: its epoch runs again from there.
        assert_eq!(f.judge(&claim(16, 5)), Verdict::Claim { epoch: 5 });
        assert_eq!(f.judge(&frame(17, 5)), Verdict::Apply);
    }

    #[test]
    fn an_owners_frame_that_lands_in_place_after_a_rogue_took_its_positions_does_not_count() {
        // Found by the fault rig: an insider's three messages took positions 6 to 8, which
        // the owner of epoch 2 had published frames for; JetStream refused those three on
        // their expected last sequence and took the owner's next, meant for 9, at 9.
        let mut f = Fence::resume(2, 5, None, false);
        assert_eq!(f.judge(&frame(6, 1)), Verdict::Skip(SkipReason::Epoch));
        let wrong_place = Message {
            prev: 3,
            ..frame(7, 2)
        };
        assert_eq!(f.judge(&wrong_place), Verdict::Skip(SkipReason::Position));
        let duplicate = Message {
            prev: 4,
            ..frame(8, 2)
        };
        assert_eq!(f.judge(&duplicate), Verdict::Skip(SkipReason::Position));
        assert_eq!(f.judge(&frame(9, 2)), Verdict::Skip(SkipReason::Epoch));
        assert_eq!(
            f.judge(&chunk(10, 2, 1, 2)),
            Verdict::Skip(SkipReason::Epoch)
        );
        // A replica reopened here decides alike.
        let mut resumed = Fence::resume(2, 10, None, true);
        assert_eq!(resumed, f);
        assert_eq!(
            resumed.judge(&frame(11, 2)),
            Verdict::Skip(SkipReason::Epoch)
        );
        assert_eq!(resumed.judge(&claim(12, 3)), Verdict::Claim { epoch: 3 });
        assert_eq!(resumed.judge(&frame(13, 3)), Verdict::Apply);
    }

    #[test]
    fn a_fence_resumed_inside_a_chunk_group_judges_as_the_one_that_never_stopped() {
        let mut whole = Fence::resume(2, 4, None, false);
        assert_eq!(
            whole.judge(&chunk(5, 2, 1, 3)),
            Verdict::Skip(SkipReason::Pending)
        );
        assert_eq!(
            whole.judge(&chunk(6, 2, 2, 3)),
            Verdict::Skip(SkipReason::Pending)
        );
        // A replica reopened here holds two chunks of three (`ClusterLog::open_group`).
        let mut resumed = Fence::resume(2, 6, Some((2, 3)), false);
        assert_eq!(resumed, whole);
        assert_eq!(
            resumed.judge(&chunk(7, 2, 3, 3)),
            Verdict::ApplyAssembled { first: 5 }
        );
        // Without the group it would be a chunk that continues nothing.
        assert_eq!(
            Fence::resume(2, 6, None, false).judge(&chunk(7, 2, 3, 3)),
            Verdict::Skip(SkipReason::Chunk)
        );
    }

    #[test]
    fn a_chunk_group_counts_only_whole_consecutive_and_in_one_epoch() {
        let mut f = Fence::resume(1, 0, None, false);
        assert_eq!(
            f.judge(&chunk(1, 1, 1, 3)),
            Verdict::Skip(SkipReason::Pending)
        );
        assert_eq!(
            f.judge(&chunk(2, 1, 2, 3)),
            Verdict::Skip(SkipReason::Pending)
        );
        assert_eq!(
            f.judge(&chunk(3, 1, 3, 3)),
            Verdict::ApplyAssembled { first: 1 }
        );
        // A group broken by a claim: the claim counts, the rest of the group does not.
        assert_eq!(
            f.judge(&chunk(4, 1, 1, 2)),
            Verdict::Skip(SkipReason::Pending)
        );
        assert_eq!(f.judge(&claim(5, 2)), Verdict::Claim { epoch: 2 });
        assert_eq!(
            f.judge(&chunk(6, 1, 2, 2)),
            Verdict::Skip(SkipReason::Epoch)
        );
        // A group out of order, a group of one, a middle chunk alone: none counts, and each
        // fences its epoch (the owner publishes a group's chunks in order, so anything else
        // is someone else's); a claim starts the next epoch each time.
        assert_eq!(f.judge(&claim(7, 3)), Verdict::Claim { epoch: 3 });
        assert_eq!(
            f.judge(&chunk(8, 3, 1, 3)),
            Verdict::Skip(SkipReason::Pending)
        );
        assert_eq!(
            f.judge(&chunk(9, 3, 3, 3)),
            Verdict::Skip(SkipReason::Chunk)
        );
        assert_eq!(f.judge(&frame(10, 3)), Verdict::Skip(SkipReason::Epoch));
        assert_eq!(f.judge(&claim(11, 4)), Verdict::Claim { epoch: 4 });
        assert_eq!(
            f.judge(&chunk(12, 4, 1, 1)),
            Verdict::Skip(SkipReason::Chunk)
        );
        assert_eq!(f.judge(&claim(13, 5)), Verdict::Claim { epoch: 5 });
        assert_eq!(
            f.judge(&chunk(14, 5, 2, 3)),
            Verdict::Skip(SkipReason::Chunk)
        );
        assert_eq!(f.judge(&claim(15, 6)), Verdict::Claim { epoch: 6 });
        // A first chunk that breaks an open group starts its own.
        assert_eq!(
            f.judge(&chunk(16, 6, 1, 2)),
            Verdict::Skip(SkipReason::Pending)
        );
        assert_eq!(
            f.judge(&chunk(17, 6, 1, 2)),
            Verdict::Skip(SkipReason::Pending)
        );
        assert_eq!(
            f.judge(&chunk(18, 6, 2, 2)),
            Verdict::ApplyAssembled { first: 17 }
        );
        assert_eq!(f.judge(&frame(19, 6)), Verdict::Apply);
    }

    #[test]
    fn a_message_out_of_stream_order_is_refused_without_moving_on() {
        let mut f = Fence::resume(1, 5, None, false);
        assert_eq!(f.judge(&frame(7, 1)), Verdict::Skip(SkipReason::Position));
        assert_eq!(f.last(), 5);
        assert_eq!(f.judge(&frame(6, 1)), Verdict::Apply);
    }

    /// One message of a random stream: which of three publishers sent it, and how its
    /// headers were chosen (honestly from what that publisher believes, or at random: a rogue
    /// insider).
    #[derive(Debug, Clone)]
    enum Step {
        /// Publisher `who` claims (epoch: the highest it has seen + 1).
        Claim { who: usize },
        /// Publisher `who` publishes a frame with its epoch, at the position it believes next.
        Frame { who: usize },
        /// Publisher `who` catches up with the stream (sees every verdict so far, and so which
        /// of the positions it believed it wrote the stream never held).
        CatchUp { who: usize },
        /// Publisher `who` publishes a frame that JetStream refuses (its expected last
        /// sequence was taken): nothing lands, and its next frames are already on their way,
        /// each meant for the position after.
        Refused { who: usize },
        /// A rogue message with arbitrary headers.
        Rogue { epoch: u64, back: u64, claim: bool },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            1 => (0..3usize).prop_map(|who| Step::Claim { who }),
            3 => (0..3usize).prop_map(|who| Step::Frame { who }),
            1 => (0..3usize).prop_map(|who| Step::CatchUp { who }),
            1 => (0..3usize).prop_map(|who| Step::Refused { who }),
            1 => (0..6u64, 0..3u64, any::<bool>())
                .prop_map(|(epoch, back, claim)| Step::Rogue { epoch, back, claim }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Against random interleavings of three publishers and a rogue insider: every counted
        /// frame carries the epoch of the last counted claim and sits right after the message
        /// its publisher saw last; claims only ever raise the epoch; a message of an epoch
        /// below the highest counted claim never counts; a publisher's frame counts only if
        /// every position it believes it wrote since its claim holds its own message (or a
        /// rogue's that forged the epoch and place, which only the running CRC tells apart);
        /// and the rule is deterministic (a second replica fed the same stream decides alike).
        #[test]
        fn only_the_current_owner_in_place_counts(steps in proptest::collection::vec(step(), 1..80)) {
            let mut stream: Vec<Message> = Vec::new();
            // Each publisher's view: (epoch it holds, position it believes last).
            let mut views = [(0u64, 0u64); 3];
            let mut seen_epoch = [0u64; 3];
            // The positions each publisher believes it wrote since its claim counted.
            let mut written: [Vec<u64>; 3] = Default::default();
            // Who sent each message (`None`: the rogue).
            let mut senders: Vec<Option<usize>> = Vec::new();
            let mut fence = Fence::default();
            let mut verdicts = Vec::new();
            for s in &steps {
                let position = stream.len() as u64 + 1;
                let m = match *s {
                    Step::CatchUp { who } => {
                        views[who].1 = fence.last();
                        seen_epoch[who] = fence.epoch();
                        // It now knows its refused frames never landed: it believes it
                        // wrote only positions the stream holds.
                        written[who].retain(|&q| q <= fence.last());
                        continue;
                    }
                    Step::Refused { who } => {
                        views[who].1 += 1;
                        written[who].push(views[who].1);
                        continue;
                    }
                    Step::Claim { who } => {
                        let epoch = seen_epoch[who].max(views[who].0) + 1;
                        Message { position, epoch, prev: views[who].1, claim: true, chunk: None }
                    }
                    Step::Frame { who } => {
                        Message { position, epoch: views[who].0, prev: views[who].1, claim: false, chunk: None }
                    }
                    Step::Rogue { epoch, back, claim } => Message {
                        position,
                        epoch,
                        prev: (position - 1).saturating_sub(back),
                        claim,
                        chunk: None,
                    },
                };
                let before = (fence.epoch(), fence.last());
                let v = fence.judge(&m);
                match v {
                    Verdict::Apply => {
                        prop_assert_eq!(m.epoch, before.0);
                        prop_assert_eq!(m.prev, before.1);
                        prop_assert!(before.0 > 0);
                    }
                    Verdict::Claim { epoch } => {
                        prop_assert!(epoch > before.0);
                        prop_assert_eq!(m.prev, before.1);
                    }
                    Verdict::ApplyAssembled { .. } => prop_assert!(false, "no chunks were sent"),
                    Verdict::Skip(_) => {}
                }
                if m.epoch < before.0 {
                    prop_assert!(matches!(v, Verdict::Skip(_)));
                }
                let sender = match *s {
                    Step::Claim { who } | Step::Frame { who } => Some(who),
                    _ => None,
                };
                stream.push(m);
                verdicts.push(v);
                senders.push(sender);
                // An honest publisher believes its message is at the next position.
                if let Some(who) = sender {
                    if let Verdict::Claim { epoch } = v {
                        views[who].0 = epoch;
                        written[who].clear();
                    }
                    views[who].1 += 1;
                    written[who].push(views[who].1);
                    if v == Verdict::Apply {
                        for &q in &written[who] {
                            let i = usize::try_from(q - 1).unwrap();
                            let own = senders.get(i) == Some(&Some(who));
                            let forged = senders.get(i) == Some(&None)
                                && !matches!(verdicts[i], Verdict::Skip(_));
                            prop_assert!(
                                own || forged,
                                "publisher {} counted at {} over position {} it never wrote",
                                who, position, q
                            );
                        }
                    }
                }
            }
            let mut replica = Fence::default();
            let again: Vec<Verdict> = stream.iter().map(|m| replica.judge(m)).collect();
            prop_assert_eq!(again, verdicts);
            prop_assert_eq!(replica, fence);
        }
    }
}
