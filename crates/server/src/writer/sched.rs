//! The writer's scheduler: which ledger's jobs the next batch takes, and when a lane is woken
//! or started. Plain data and methods, no runtime: the lanes call it under a lock, and do
//! what it answers ([`Wake`]: ring an idle lane's bell, or start a lane).
//!
//! Each ledger with queued jobs has a FIFO queue of them; the ledgers with queued jobs wait
//! in a round-robin list, so a busy ledger never starves another: a lane takes from the first
//! ledger of the list that may take a lane, and puts it back at the end while jobs remain. A
//! ledger has at most [`Limits::lanes`] lanes at once, the second and later only while its
//! queue holds at least [`Limits::extra_min_queue`] requests. A batch is the front of one
//! ledger's queue, up to [`Limits::batch_max`] requests (a first job larger than that is taken
//! whole). The room ([`Limits::queue_max`]) counts the requests queued over all ledgers. A
//! ledger's entry lives only while it has jobs queued or a lane on it.

use ledger_core::ledger::LedgerId;
use std::collections::{HashMap, VecDeque};

/// The scheduler's bounds (from `WriterTuning` and `EXTRA_LANE_MIN_QUEUE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Limits {
    /// Lanes on one ledger at once, at most (`WRITER_LANES`).
    pub lanes: usize,
    /// Lanes running in the process, at most (`MAX_WRITER_LANES`).
    pub max_lanes: usize,
    /// Requests per batch, at most (`MAX_BATCH`).
    pub batch_max: usize,
    /// Requests queued over all ledgers, at most (`MAX_WRITE_QUEUE`).
    pub queue_max: usize,
    /// Requests a ledger must have queued before a lane other than its first takes from it
    /// (`EXTRA_LANE_MIN_QUEUE`).
    pub extra_min_queue: usize,
}

/// Why a job was not queued (nothing of it was).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// It has more requests than the queue can ever hold.
    Never,
    /// The queue has room for `free` requests only.
    Full { free: usize },
}

/// What the lanes must do after a change: ring an idle lane's bell, or start a lane.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Wake<B> {
    Lane(B),
    Spawn,
}

/// Jobs of one ledger taken together, in their order.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Batch<J> {
    pub ledger: LedgerId,
    pub jobs: Vec<J>,
    /// Requests of the jobs, in all.
    pub requests: usize,
}

/// What a lane does next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next<J> {
    /// Apply this batch, then come back with its ledger.
    Apply(Batch<J>),
    /// Nothing to take: wait for the bell (registered as idle).
    Wait,
    /// Nothing to take and every handle is gone: end.
    End,
}

/// One ledger's queue and the lanes on it.
struct Book<J> {
    /// Jobs and their request counts, oldest first.
    jobs: VecDeque<(J, usize)>,
    /// Requests of `jobs`.
    queued: usize,
    lanes: usize,
}

/// Per-ledger queues, the round-robin of ledgers, and the lanes' count; `J` a job, `B` an
/// idle lane's bell.
pub(super) struct Sched<J, B> {
    limits: Limits,
    books: HashMap<LedgerId, Book<J>>,
    /// Ledgers with queued jobs, in the order they are served.
    ready: VecDeque<LedgerId>,
    /// Requests queued over all ledgers.
    queued: usize,
    /// Lanes waiting for work, each with its bell.
    idle: Vec<B>,
    /// Lanes rung or started that have not yet looked for work.
    woken: usize,
    /// Lanes alive (busy, idle, or woken).
    running: usize,
    /// Every handle is gone: lanes that find nothing end.
    closed: bool,
}

impl<J, B: PartialEq> Sched<J, B> {
    pub fn new(limits: Limits) -> Self {
        Sched {
            limits,
            books: HashMap::new(),
            ready: VecDeque::new(),
            queued: 0,
            idle: Vec::new(),
            woken: 0,
            running: 0,
            closed: false,
        }
    }

    /// Queues `job` of `n` requests on `ledger` if the room holds all of them.
    pub fn push(&mut self, ledger: LedgerId, job: J, n: usize) -> Result<(), Refused> {
        if n > self.limits.queue_max {
            return Err(Refused::Never);
        }
        let free = self.limits.queue_max - self.queued;
        if n > free {
            return Err(Refused::Full { free });
        }
        let book = self.books.entry(ledger).or_insert_with(|| Book {
            jobs: VecDeque::new(),
            queued: 0,
            lanes: 0,
        });
        if book.jobs.is_empty() {
            self.ready.push_back(ledger);
        }
        book.jobs.push_back((job, n));
        book.queued += n;
        self.queued += n;
        Ok(())
    }

    /// May a lane (another one) take from this ledger now?
    fn takeable(&self, ledger: LedgerId) -> bool {
        let b = &self.books[&ledger];
        !b.jobs.is_empty()
            && (b.lanes == 0
                || (b.lanes < self.limits.lanes && b.queued >= self.limits.extra_min_queue))
    }

    /// Takes a batch from the first ledger of the round-robin that may take a lane (the lane
    /// is then on it until [`Sched::done`]); `None` when none may.
    pub fn take(&mut self) -> Option<Batch<J>> {
        let at = self.ready.iter().position(|&l| self.takeable(l))?;
        let ledger = self.ready.remove(at).expect("a position in the list");
        let book = self
            .books
            .get_mut(&ledger)
            .expect("a ready ledger has a book");
        book.lanes += 1;
        let mut jobs = Vec::new();
        let mut requests = 0;
        while let Some((_, n)) = book.jobs.front() {
            if !jobs.is_empty() && requests + n > self.limits.batch_max {
                break;
            }
            let (job, n) = book.jobs.pop_front().expect("a front job");
            requests += n;
            jobs.push(job);
        }
        book.queued -= requests;
        self.queued -= requests;
        if !book.jobs.is_empty() {
            self.ready.push_back(ledger);
        }
        Some(Batch {
            ledger,
            jobs,
            requests,
        })
    }

    /// A lane is done with its batch of `ledger`; the ledger's entry goes once it has neither
    /// jobs nor lanes.
    pub fn done(&mut self, ledger: LedgerId) {
        let book = self
            .books
            .get_mut(&ledger)
            .expect("a ledger with a lane has a book");
        book.lanes -= 1;
        if book.lanes == 0 && book.jobs.is_empty() {
            self.books.remove(&ledger);
        }
    }

    /// A lane looks for work: done with `done`'s batch (if any), arrived after a wake
    /// (`woken`); it gets a batch, or is registered idle with `bell`, or ends.
    pub fn next(&mut self, done: Option<LedgerId>, woken: bool, bell: B) -> Next<J> {
        if let Some(ledger) = done {
            self.done(ledger);
        }
        if woken {
            self.woken -= 1;
        }
        match self.take() {
            Some(batch) => Next::Apply(batch),
            None if self.closed => {
                self.running -= 1;
                Next::End
            }
            None => {
                self.idle.push(bell);
                Next::Wait
            }
        }
    }

    /// An idle lane waited its time out: `true` (it ends) if it is still idle, `false` if it
    /// was rung meanwhile (it must take its ring and look for work).
    pub fn retire(&mut self, bell: &B) -> bool {
        let Some(at) = self.idle.iter().position(|b| b == bell) else {
            return false;
        };
        self.idle.swap_remove(at);
        self.running -= 1;
        true
    }

    /// Rings or starts lanes until every ledger that may take a lane has one on its way (or
    /// `max_lanes` run). A lane coming back from a batch may get there first; the one rung then
    /// finds nothing and waits again.
    pub fn wakes(&mut self) -> Vec<Wake<B>> {
        let mut wakes = Vec::new();
        while self.takeable_count(self.woken + 1) > self.woken {
            if let Some(bell) = self.idle.pop() {
                wakes.push(Wake::Lane(bell));
            } else if self.running < self.limits.max_lanes {
                self.running += 1;
                wakes.push(Wake::Spawn);
            } else {
                break;
            }
            self.woken += 1;
        }
        wakes
    }

    /// Ledgers that may take a lane now, counted up to `cap`. The list's first ledgers that
    /// may not are those with lanes on them, at most `max_lanes`: the scan stays short.
    fn takeable_count(&self, cap: usize) -> usize {
        let mut n = 0;
        for &l in &self.ready {
            if n == cap {
                break;
            }
            n += usize::from(self.takeable(l));
        }
        n
    }

    /// Every handle is gone: idle lanes are rung (returned) to end once nothing is left.
    pub fn close(&mut self) -> Vec<B> {
        self.closed = true;
        self.woken += self.idle.len();
        std::mem::take(&mut self.idle)
    }

    /// Requests queued over all ledgers.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.queued
    }

    /// Lanes alive.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Ledgers with an entry (jobs queued or a lane on them).
    #[cfg(test)]
    fn ledgers(&self) -> usize {
        self.books.len()
    }

    /// Lanes on `ledger` now.
    #[cfg(test)]
    fn lanes_on(&self, ledger: LedgerId) -> usize {
        self.books.get(&ledger).map_or(0, |b| b.lanes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: LedgerId = 0;
    const B: LedgerId = 1;
    const C: LedgerId = 2;

    fn limits() -> Limits {
        Limits {
            lanes: 2,
            max_lanes: 8,
            batch_max: 4,
            queue_max: 100,
            extra_min_queue: 3,
        }
    }

    /// A job: its ledger and its number there, so a batch shows whose jobs it took.
    type Job = (LedgerId, usize);
    type S = Sched<Job, u32>;

    fn with(limits: Limits) -> S {
        Sched::new(limits)
    }

    /// Queues `count` single-request jobs on `ledger`, numbered from `from`.
    fn fill(s: &mut S, ledger: LedgerId, from: usize, count: usize) {
        for i in from..from + count {
            s.push(ledger, (ledger, i), 1).unwrap();
        }
    }

    fn ledgers_of(batch: &Batch<Job>) -> Vec<LedgerId> {
        let mut l: Vec<LedgerId> = batch.jobs.iter().map(|j| j.0).collect();
        l.dedup();
        l
    }

    #[test]
    fn a_busy_ledger_does_not_starve_another_the_lanes_take_them_in_turn() {
        let mut s = with(Limits {
            lanes: 1,
            batch_max: 1,
            ..limits()
        });
        fill(&mut s, A, 0, 50);
        fill(&mut s, B, 0, 2);
        let mut served = Vec::new();
        for _ in 0..6 {
            let batch = s.take().expect("work for a lane");
            served.push(batch.ledger);
            s.done(batch.ledger);
        }
        assert_eq!(served, [A, B, A, B, A, A]);
    }

    #[test]
    fn a_ledger_queued_behind_busy_ones_is_taken_by_the_next_free_lane() {
        let mut s = with(Limits {
            lanes: 1,
            ..limits()
        });
        fill(&mut s, A, 0, 10);
        fill(&mut s, B, 0, 10);
        let a = s.take().unwrap();
        let b = s.take().unwrap();
        assert_eq!((a.ledger, b.ledger), (A, B));
        fill(&mut s, C, 0, 1);
        assert_eq!(s.take().unwrap().ledger, C, "A and B have their one lane");
        assert_eq!(s.take(), None);
    }

    #[test]
    fn one_ledger_never_has_more_than_lanes_lanes_and_extra_lanes_only_while_its_queue_is_deep() {
        // (single requests queued on the ledger, lanes it gets): a lane takes one, and
        // another follows while at least 3 (extra_min_queue) remain.
        let cases: &[(usize, usize)] = &[(1, 1), (2, 1), (3, 1), (4, 2), (20, 2), (100, 2)];
        for &(queued, lanes) in cases {
            let mut s = with(Limits {
                batch_max: 1,
                ..limits()
            });
            fill(&mut s, A, 0, queued);
            let mut got = 0;
            while s.take().is_some() {
                got += 1;
                assert!(s.lanes_on(A) <= 2);
            }
            assert_eq!((got, s.lanes_on(A)), (lanes, lanes), "{queued} queued");
        }
    }

    #[test]
    fn the_extra_lane_is_measured_on_the_ledgers_own_queue_not_the_total() {
        let mut s = with(Limits {
            batch_max: 1,
            ..limits()
        });
        fill(&mut s, A, 0, 2);
        fill(&mut s, B, 0, 40);
        assert_eq!(s.take().unwrap().ledger, A);
        assert_eq!(s.take().unwrap().ledger, B);
        assert_eq!(s.take().unwrap().ledger, B, "B's queue is deep");
        assert_eq!(s.take(), None, "A's is not; B has its two lanes");
    }

    #[test]
    fn a_batch_never_mixes_ledgers() {
        let mut s = with(Limits {
            lanes: 1,
            batch_max: 10,
            ..limits()
        });
        for i in 0..12 {
            fill(&mut s, [A, B, C][i % 3], i, 1);
        }
        let mut batches = 0;
        while let Some(batch) = s.take() {
            assert_eq!(ledgers_of(&batch), [batch.ledger]);
            assert_eq!(batch.requests, 4);
            s.done(batch.ledger);
            batches += 1;
        }
        assert_eq!(batches, 3);
    }

    #[test]
    fn a_batch_takes_jobs_in_order_up_to_batch_max_and_a_larger_job_whole_and_alone() {
        // Job sizes queued on one ledger, then the sizes of each batch taken.
        let cases: &[(&[usize], &[&[usize]])] = &[
            (&[1, 1, 1, 1, 1], &[&[1, 1, 1, 1], &[1]]),
            (&[1, 1, 1, 6, 2], &[&[1, 1, 1], &[6], &[2]]),
            (&[6, 1], &[&[6], &[1]]),
            (&[2, 2, 2], &[&[2, 2], &[2]]),
            (&[3, 2, 1], &[&[3], &[2, 1]]),
        ];
        for &(sizes, expected) in cases {
            let mut s: Sched<usize, u32> = Sched::new(Limits {
                lanes: 1,
                ..limits()
            });
            for &n in sizes {
                s.push(A, n, n).unwrap();
            }
            let mut taken: Vec<Vec<usize>> = Vec::new();
            while let Some(batch) = s.take() {
                assert_eq!(batch.requests, batch.jobs.iter().sum::<usize>());
                taken.push(batch.jobs);
                s.done(A);
            }
            assert_eq!(taken, expected, "{sizes:?}");
            assert_eq!(s.queued(), 0);
        }
    }

    #[test]
    fn the_room_counts_requests_over_all_ledgers_and_a_job_is_refused_whole() {
        let mut s = with(Limits {
            queue_max: 10,
            ..limits()
        });
        s.push(A, (A, 0), 4).unwrap();
        s.push(B, (B, 0), 4).unwrap();
        assert_eq!(s.push(C, (C, 0), 3), Err(Refused::Full { free: 2 }));
        assert_eq!(s.push(A, (A, 1), 11), Err(Refused::Never));
        s.push(C, (C, 0), 2).unwrap();
        assert_eq!(s.queued(), 10);
        let batch = s.take().unwrap();
        assert_eq!(
            s.queued(),
            10 - batch.requests,
            "taking gives the room back"
        );
        assert_eq!(s.ledgers(), 3, "nothing of the refused jobs");
    }

    #[test]
    fn a_ledgers_entry_goes_once_its_queue_is_empty_and_no_lane_is_on_it() {
        let mut s = with(limits());
        for round in 0..1000 {
            let ledger = round as LedgerId;
            fill(&mut s, ledger, 0, 1);
            let batch = s.take().unwrap();
            assert_eq!(s.ledgers(), 1, "its lane is still on it");
            s.done(batch.ledger);
            assert_eq!(s.ledgers(), 0);
        }
        fill(&mut s, A, 0, 3);
        let first = s.take().unwrap();
        fill(&mut s, A, 3, 1);
        s.done(first.ledger);
        assert_eq!(s.ledgers(), 1, "a job still queued keeps it");
        let second = s.take().unwrap();
        s.done(second.ledger);
        assert_eq!((s.ledgers(), s.queued()), (0, 0));
    }

    #[test]
    fn a_ledger_with_work_gets_a_lane_started_and_no_more_than_max_lanes_run() {
        let mut s = with(Limits {
            max_lanes: 2,
            ..limits()
        });
        fill(&mut s, A, 0, 1);
        assert_eq!(s.wakes(), [Wake::Spawn]);
        assert_eq!(s.wakes(), [], "one is on its way");
        fill(&mut s, B, 0, 1);
        fill(&mut s, C, 0, 1);
        assert_eq!(s.wakes(), [Wake::Spawn], "the second, and no third");
        assert_eq!(s.running(), 2);
        assert!(matches!(s.next(None, true, 1), Next::Apply(b) if b.ledger == A));
        assert!(matches!(s.next(None, true, 2), Next::Apply(b) if b.ledger == B));
        assert_eq!(s.wakes(), [], "C waits for a lane to come back");
        assert!(matches!(s.next(Some(A), false, 1), Next::Apply(b) if b.ledger == C));
    }

    #[test]
    fn an_idle_lane_is_rung_before_another_is_started_and_ends_when_nothing_came() {
        let mut s = with(limits());
        fill(&mut s, A, 0, 1);
        assert_eq!(s.wakes(), [Wake::Spawn]);
        let Next::Apply(batch) = s.next(None, true, 7) else {
            panic!("work for the lane")
        };
        assert_eq!(s.next(Some(batch.ledger), false, 7), Next::Wait);
        fill(&mut s, B, 0, 1);
        assert_eq!(s.wakes(), [Wake::Lane(7)]);
        assert!(!s.retire(&7), "rung: it must look");
        assert!(matches!(s.next(None, true, 7), Next::Apply(_)));
        assert_eq!(s.next(Some(B), false, 7), Next::Wait);
        assert!(s.retire(&7), "nothing came: it ends");
        assert_eq!((s.running(), s.ledgers()), (0, 0));
    }

    #[test]
    fn once_every_handle_is_gone_the_lanes_finish_the_queue_and_end() {
        let mut s = with(limits());
        fill(&mut s, A, 0, 1);
        fill(&mut s, B, 0, 1);
        assert_eq!(s.wakes(), [Wake::Spawn, Wake::Spawn]);
        let Next::Apply(a) = s.next(None, true, 1) else {
            panic!("A for the first")
        };
        let Next::Apply(b) = s.next(None, true, 2) else {
            panic!("B for the second")
        };
        assert_eq!(s.next(Some(a.ledger), false, 1), Next::Wait);
        fill(&mut s, B, 1, 1);
        assert_eq!(s.close(), [1]);
        assert_eq!(s.next(None, true, 1), Next::End, "B has its lane");
        assert!(matches!(s.next(Some(b.ledger), false, 2), Next::Apply(_)));
        assert_eq!(s.next(Some(B), false, 2), Next::End);
        assert_eq!((s.running(), s.ledgers(), s.queued()), (0, 0, 0));
    }
}
