//! Attributions: how much each cue moved one prediction from a stated baseline.
//!
//! Contract: a window's cues are the players of a cooperative game whose value, for a
//! coalition of them, is the predictor's score (1-5) toward a story when only those cues
//! are as they were and the others are left out. A player is a part of one modality
//! ([`Part`]): a cue group of columns (left out = the model's population baseline on the
//! modality's present frames), an utterance's frames (left out = absent on those frames, as
//! the contract's masks say), or the whole modality (a model without a baseline for it).
//! A modality none of whose players is in the coalition is absent (mask 0 on every frame).
//! The players are grouped by modality, and each player's attribution is its Owen value: the
//! Shapley value of its modality in the game between modalities, shared among the
//! modality's cues by the Shapley value within it, averaged over the other modalities'
//! presence. So, exactly: baseline (every modality absent) + the sum of all cues' values =
//! the prediction, and a modality's cues sum to the modality's Shapley value.
//!
//! [`Plan::new`] decides what to evaluate: every coalition the exact Owen values need when
//! they fit the budget (`max_coalitions`), else the modalities' Shapley values exactly
//! (never more than 2^7 coalitions: a layout has at most seven modalities) and the cues
//! within them from `K` sampled orders that keep each modality's cues together (in
//! antithetic pairs, seeded by the window so a replay gives the same numbers), each cue's
//! standard error stated, and the sampled cues of a modality shifted by one common amount so
//! that they sum to its exact value (the sum property holds exactly either way). The caller
//! evaluates the coalitions ([`Plan::variant`] says how each modality looks) and hands the
//! values back to [`Plan::attribute`]. Nothing here runs a model or knows a story.

use std::collections::HashMap;

/// Which part of a modality a player is.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// The whole modality (there is no baseline to replace a part of it by).
    Whole,
    /// These columns; left out = the baseline's values on the modality's present frames.
    Columns(Vec<usize>),
    /// These frames (one utterance of `text`); left out = absent on those frames.
    Frames(Vec<usize>),
}

/// One player: a cue of one modality.
#[derive(Debug, Clone, PartialEq)]
pub struct Player {
    /// The modality's position among the predictor's modalities.
    pub modality: usize,
    pub cue: String,
    pub part: Part,
    /// An utterance's time on the session timeline: its first and last frame.
    pub span_ns: Option<(crate::Nanos, crate::Nanos)>,
}

/// A set of players, bit i for player i (at most 64 players).
pub type Coalition = u64;

/// How one modality of the predictor looks in a coalition.
#[derive(Debug, Clone, PartialEq)]
pub enum ModalityEdit {
    /// As in the window.
    AsIs,
    /// Absent on every frame.
    Absent,
    /// Present, with these columns at the baseline's values and these frames absent.
    Partial {
        baseline_columns: Vec<usize>,
        absent_frames: Vec<usize>,
    },
}

/// How each of the predictor's modalities looks in one coalition.
pub type Variant = Vec<ModalityEdit>;

/// The most players a plan takes (a coalition is a `u64`).
pub const MAX_PLAYERS: usize = 64;

/// How the values were computed.
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    /// Every coalition the Owen values need.
    Exact,
    /// The modalities exactly; their cues from this many sampled orders.
    Sampled { orders: usize },
}

impl Method {
    /// As stored: `exact` or `sampled:K`.
    pub fn label(&self) -> String {
        match self {
            Method::Exact => "exact".into(),
            Method::Sampled { orders } => format!("sampled:{orders}"),
        }
    }
}

/// What to evaluate for one window and predictor, and how to combine it.
#[derive(Debug, Clone)]
pub struct Plan {
    players: Vec<Player>,
    /// The predictor's modality count.
    modalities: usize,
    /// The modalities with players (present in the window), and each one's players.
    unions: Vec<(usize, Vec<usize>)>,
    method: Method,
    /// For a sampled plan, the orders (player indices).
    orders: Vec<Vec<usize>>,
    coalitions: Vec<Coalition>,
}

/// One cue's attribution.
#[derive(Debug, Clone, PartialEq)]
pub struct CueValue {
    pub player: usize,
    /// On the 1-5 scale.
    pub value: f64,
    /// Its standard error when sampled.
    pub se: Option<f64>,
}

fn factorial(n: usize) -> f64 {
    (1..=n).map(|k| k as f64).product()
}

/// The Shapley weight of a coalition of `s` others among `n` players.
fn weight(s: usize, n: usize) -> f64 {
    factorial(s) * factorial(n - 1 - s) / factorial(n)
}

/// A small deterministic generator (SplitMix64): the sampled orders are reproducible from the
/// window and the predictor, without a dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

impl Plan {
    /// Plans the attribution of `players` (grouped by `modality`, at most [`MAX_PLAYERS`])
    /// for a predictor of `modalities` modalities: exact when the Owen values need at most
    /// `max_coalitions` coalitions, else sampled with as many orders as fit (at least two).
    /// `seed` fixes the sampled orders. `None` when there is no player.
    pub fn new(
        players: Vec<Player>,
        modalities: usize,
        max_coalitions: usize,
        seed: u64,
    ) -> Option<Self> {
        if players.is_empty() || players.len() > MAX_PLAYERS {
            return None;
        }
        let mut unions: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, p) in players.iter().enumerate() {
            match unions.iter_mut().find(|(m, _)| *m == p.modality) {
                Some((_, members)) => members.push(i),
                None => unions.push((p.modality, vec![i])),
            }
        }
        let p = unions.len();
        let modality_level = 1usize << p;
        let exact_count = modality_level
            + unions
                .iter()
                .map(|(_, g)| (1usize << (p - 1)) * ((1usize << g.len()) - 2))
                .sum::<usize>();
        let mut plan = Plan {
            players,
            modalities,
            unions,
            method: Method::Exact,
            orders: Vec::new(),
            coalitions: Vec::new(),
        };
        let mut set: Vec<Coalition> = (0..modality_level)
            .map(|r| plan.union_coalition(r))
            .collect();
        if exact_count <= max_coalitions {
            for (k, (_, g)) in plan.unions.iter().enumerate() {
                for r in 0..modality_level {
                    if r & (1 << k) != 0 {
                        continue;
                    }
                    let base = plan.union_coalition(r);
                    for t in 1..(1u64 << g.len()) - 1 {
                        set.push(base | subset(g, t));
                    }
                }
            }
        } else {
            let inner: usize = plan.unions.iter().map(|(_, g)| g.len() - 1).sum();
            let room = max_coalitions.saturating_sub(modality_level) / inner.max(1);
            let orders = (room / 2 * 2).max(2);
            let mut rng = SplitMix(seed);
            for k in 0..orders {
                let order = if k % 2 == 1 {
                    // Antithetic: the previous order reversed (still modality by modality).
                    plan.orders[k - 1].iter().rev().copied().collect()
                } else {
                    let mut us: Vec<usize> = (0..p).collect();
                    rng.shuffle(&mut us);
                    let mut order = Vec::new();
                    for u in us {
                        let mut g = plan.unions[u].1.clone();
                        rng.shuffle(&mut g);
                        order.extend(g);
                    }
                    order
                };
                let mut c: Coalition = 0;
                for j in &order {
                    c |= 1 << j;
                    set.push(c);
                }
                plan.orders.push(order);
            }
            plan.method = Method::Sampled { orders };
        }
        set.sort_unstable();
        set.dedup();
        plan.coalitions = set;
        Some(plan)
    }

    /// The players, in the order the values refer to them.
    pub fn players(&self) -> &[Player] {
        &self.players
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// Every coalition whose value [`Self::attribute`] needs, the empty and the full one
    /// among them.
    pub fn coalitions(&self) -> &[Coalition] {
        &self.coalitions
    }

    /// Every player of the present modalities.
    pub fn full(&self) -> Coalition {
        self.union_coalition((1 << self.unions.len()) - 1)
    }

    /// The players of the unions in bit set `r` (over `self.unions`).
    fn union_coalition(&self, r: usize) -> Coalition {
        self.unions
            .iter()
            .enumerate()
            .filter(|(k, _)| r & (1 << k) != 0)
            .fold(0, |c, (_, (_, g))| c | subset(g, u64::MAX))
    }

    /// How each modality looks in coalition `c`: as in the window when all its players are
    /// in (or it has none: absent in the window, it stays so), absent when none is,
    /// otherwise present with the left-out players' columns at the baseline and their
    /// frames absent.
    pub fn variant(&self, c: Coalition) -> Variant {
        let mut out = vec![ModalityEdit::AsIs; self.modalities];
        for (m, g) in &self.unions {
            let inside = g.iter().filter(|&&j| c & (1 << j) != 0).count();
            out[*m] = if inside == g.len() {
                ModalityEdit::AsIs
            } else if inside == 0 {
                ModalityEdit::Absent
            } else {
                let mut baseline_columns = Vec::new();
                let mut absent_frames = Vec::new();
                for &j in g.iter().filter(|&&j| c & (1 << j) == 0) {
                    match &self.players[j].part {
                        Part::Columns(cols) => baseline_columns.extend(cols),
                        Part::Frames(frames) => absent_frames.extend(frames),
                        Part::Whole => {}
                    }
                }
                ModalityEdit::Partial {
                    baseline_columns,
                    absent_frames,
                }
            };
        }
        out
    }

    /// The attributions from the value of every coalition of [`Self::coalitions`] (a
    /// missing one counts as the empty coalition's value, so a caller's gap cannot panic;
    /// the sum property is then still exact but the values wrong, so callers give them all).
    /// Returns the baseline (the empty coalition's value) and one value per player.
    pub fn attribute(&self, values: &HashMap<Coalition, f64>) -> (f64, Vec<CueValue>) {
        let empty = values.get(&0).copied().unwrap_or(f64::NAN);
        let v = |c: Coalition| values.get(&c).copied().unwrap_or(empty);
        let p = self.unions.len();
        let mut out: Vec<CueValue> = (0..self.players.len())
            .map(|player| CueValue {
                player,
                value: 0.0,
                se: None,
            })
            .collect();
        // The modalities' Shapley values, exactly.
        let mut modality_value = vec![0.0; p];
        for (k, value) in modality_value.iter_mut().enumerate() {
            for r in 0..(1usize << p) {
                if r & (1 << k) != 0 {
                    continue;
                }
                let w = weight(r.count_ones() as usize, p);
                *value += w * (v(self.union_coalition(r | (1 << k))) - v(self.union_coalition(r)));
            }
        }
        match self.method {
            Method::Exact => {
                for (k, (_, g)) in self.unions.iter().enumerate() {
                    if g.len() == 1 {
                        out[g[0]].value = modality_value[k];
                        continue;
                    }
                    for (ji, &j) in g.iter().enumerate() {
                        let others: Vec<usize> = g
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| *i != ji)
                            .map(|(_, &x)| x)
                            .collect();
                        let mut total = 0.0;
                        for r in 0..(1usize << p) {
                            if r & (1 << k) != 0 {
                                continue;
                            }
                            let wr = weight(r.count_ones() as usize, p);
                            let base = self.union_coalition(r);
                            for t in 0..(1u64 << others.len()) {
                                let wt = weight(t.count_ones() as usize, g.len());
                                let with_t = base | subset(&others, t);
                                total += wr * wt * (v(with_t | (1 << j)) - v(with_t));
                            }
                        }
                        out[j].value = total;
                    }
                }
            }
            Method::Sampled { orders } => {
                // Per antithetic pair, each player's mean marginal; then mean and standard
                // error over the pairs.
                let pairs = orders / 2;
                let mut per_pair = vec![vec![0.0; self.players.len()]; pairs];
                for (k, order) in self.orders.iter().enumerate() {
                    let mut c: Coalition = 0;
                    for &j in order {
                        let before = v(c);
                        c |= 1 << j;
                        per_pair[k / 2][j] += (v(c) - before) / 2.0;
                    }
                }
                for (k, (_, g)) in self.unions.iter().enumerate() {
                    let mut sum = 0.0;
                    for &j in g {
                        let mean = per_pair.iter().map(|s| s[j]).sum::<f64>() / pairs as f64;
                        let se = if pairs > 1 {
                            let var = per_pair.iter().map(|s| (s[j] - mean).powi(2)).sum::<f64>()
                                / (pairs - 1) as f64;
                            (var / pairs as f64).sqrt()
                        } else {
                            f64::NAN
                        };
                        out[j].value = mean;
                        out[j].se = (g.len() > 1).then_some(se);
                        sum += mean;
                    }
                    // The modality's cues sum to its exact value.
                    let shift = (modality_value[k] - sum) / g.len() as f64;
                    for &j in g {
                        out[j].value += shift;
                    }
                }
            }
        }
        (empty, out)
    }
}

/// The players of `group` whose position's bit is set in `bits`.
fn subset(group: &[usize], bits: u64) -> Coalition {
    group
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .fold(0, |c, (_, &j)| c | (1 << j))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn players(groups: &[usize]) -> Vec<Player> {
        let mut out = Vec::new();
        for (m, &n) in groups.iter().enumerate() {
            for k in 0..n {
                out.push(Player {
                    modality: m,
                    cue: format!("m{m}c{k}"),
                    part: Part::Columns(vec![k]),
                    span_ns: None,
                });
            }
        }
        out
    }

    /// A nonlinear game over player bits: interactions within and across modalities.
    fn game(c: Coalition) -> f64 {
        let b = |i: u32| f64::from(u8::from(c & (1 << i) != 0));
        (1.0 + 0.7 * b(0) + 0.2 * b(1) * b(2) - 0.4 * b(3) + 0.9 * b(4) * b(0) + 0.3 * b(5)
            - 0.25 * b(2) * b(5))
        .clamp(1.0, 5.0)
    }

    fn values(plan: &Plan) -> HashMap<Coalition, f64> {
        plan.coalitions().iter().map(|&c| (c, game(c))).collect()
    }

    /// Owen values by brute force over every order that keeps modalities together.
    fn owen_brute(groups: &[usize]) -> Vec<f64> {
        fn perms(v: Vec<usize>) -> Vec<Vec<usize>> {
            if v.len() <= 1 {
                return vec![v];
            }
            let mut out = Vec::new();
            for i in 0..v.len() {
                let mut rest = v.clone();
                let x = rest.remove(i);
                for mut p in perms(rest) {
                    p.insert(0, x);
                    out.push(p);
                }
            }
            out
        }
        let mut start = 0;
        let unions: Vec<Vec<usize>> = groups
            .iter()
            .map(|&n| {
                let g = (start..start + n).collect();
                start += n;
                g
            })
            .collect();
        let n = start;
        let mut total = vec![0.0; n];
        let mut count = 0.0;
        for uo in perms((0..unions.len()).collect()) {
            let mut orders: Vec<Vec<usize>> = vec![Vec::new()];
            for u in uo {
                let mut next = Vec::new();
                for o in &orders {
                    for p in perms(unions[u].clone()) {
                        let mut x = o.clone();
                        x.extend(p);
                        next.push(x);
                    }
                }
                orders = next;
            }
            for o in orders {
                let mut c = 0;
                for j in o {
                    let before = game(c);
                    c |= 1 << j;
                    total[j] += game(c) - before;
                }
                count += 1.0;
            }
        }
        total.iter().map(|t| t / count).collect()
    }

    #[test]
    fn exact_owen_values_match_brute_force_and_sum_to_the_prediction() {
        let groups = [2, 3, 1];
        let plan = Plan::new(players(&groups), 3, 10_000, 1).unwrap();
        assert_eq!(plan.method(), &Method::Exact);
        let (base, cues) = plan.attribute(&values(&plan));
        let brute = owen_brute(&groups);
        for (c, b) in cues.iter().zip(&brute) {
            assert!((c.value - b).abs() < 1e-12, "{} vs {b}", c.value);
        }
        let sum: f64 = cues.iter().map(|c| c.value).sum();
        assert!((base + sum - game(plan.full())).abs() < 1e-12);
        assert_eq!(base, game(0));
    }

    #[test]
    fn sampled_cues_sum_exactly_and_stay_near_the_exact_values() {
        let groups = [2, 3, 1];
        let exact = owen_brute(&groups);
        let plan = Plan::new(players(&groups), 3, 12, 42).unwrap();
        let Method::Sampled { orders } = plan.method().clone() else {
            panic!("expected sampling")
        };
        assert!(orders >= 2 && orders % 2 == 0);
        assert!(plan.coalitions().len() <= 8 + orders * 3);
        let (base, cues) = plan.attribute(&values(&plan));
        let sum: f64 = cues.iter().map(|c| c.value).sum();
        assert!((base + sum - game(plan.full())).abs() < 1e-12);
        // Each modality's cues sum to its exact Shapley value.
        for (m, range) in [(0, 0..2), (1, 2..5), (2, 5..6)] {
            let got: f64 = cues[range.clone()].iter().map(|c| c.value).sum();
            let want: f64 = exact[range].iter().sum();
            assert!((got - want).abs() < 1e-12, "modality {m}: {got} vs {want}");
        }
        // The single-cue modality needs no sampling.
        assert_eq!(cues[5].se, None);
        // Many orders converge on the exact values.
        let plan = Plan::new(players(&groups), 3, 8 + 3 * 4000, 7).unwrap();
        let (_, cues) = plan.attribute(&values(&plan));
        for (c, e) in cues.iter().zip(&exact) {
            assert!((c.value - e).abs() < 0.02, "{} vs {e}", c.value);
        }
    }

    #[test]
    fn a_modality_absent_from_the_window_has_no_player_and_stays_as_it_is() {
        // Modality 1 of 3 has no players: the variants never touch it.
        let mut ps = players(&[1, 0, 2]);
        for p in &mut ps {
            if p.modality == 1 {
                p.modality = 2;
            }
        }
        let plan = Plan::new(ps, 3, 100, 0).unwrap();
        for &c in plan.coalitions() {
            assert_eq!(plan.variant(c)[1], ModalityEdit::AsIs);
        }
        assert_eq!(plan.variant(0)[0], ModalityEdit::Absent);
        assert_eq!(plan.variant(plan.full())[2], ModalityEdit::AsIs);
        assert_eq!(
            plan.variant(0b010)[2],
            ModalityEdit::Partial {
                baseline_columns: vec![1],
                absent_frames: vec![]
            }
        );
    }

    #[test]
    fn a_game_that_reads_one_modality_gives_it_everything() {
        // Only modality 1's players move the value.
        let only = |c: Coalition| 2.0 + 1.5 * f64::from(u8::from(c & 0b0100 != 0));
        let plan = Plan::new(players(&[2, 2]), 2, 100, 0).unwrap();
        let vals = plan.coalitions().iter().map(|&c| (c, only(c))).collect();
        let (base, cues) = plan.attribute(&vals);
        assert_eq!(base, 2.0);
        assert!((cues[2].value - 1.5).abs() < 1e-12);
        assert!(cues[0].value.abs() < 1e-12 && cues[1].value.abs() < 1e-12);
    }
}
