//! The run state machine drawn as SVG, from the compiled transition table (so the
//! picture cannot drift from what the runtime enforces), with one run's path on it.
//!
//! Layout: non-terminal states in columns by their distance from the initial
//! state, terminal states in a row beneath. Every allowed transition is a thin
//! line; those the run took are thick, with a count when taken more than once.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;

use super::page::esc;

const NODE_W: f64 = 150.0;
const NODE_H: f64 = 34.0;
const COL: f64 = 185.0;
const ROW: f64 = 58.0;
const MARGIN: f64 = 20.0;

/// Where each state is drawn (centre), and the picture's size.
struct Layout {
    at: HashMap<&'static str, (f64, f64)>,
    width: f64,
    height: f64,
}

fn layout(states: &[(&'static str, bool)], transitions: &[(&'static str, &'static str)]) -> Layout {
    let terminal: HashMap<&str, bool> = states.iter().copied().collect();
    // Distance from the initial state (the first declared) over non-terminal states.
    let mut depth: HashMap<&'static str, usize> = HashMap::new();
    let mut queue = VecDeque::new();
    if let Some((first, _)) = states.first() {
        depth.insert(first, 0);
        queue.push_back(*first);
    }
    while let Some(s) = queue.pop_front() {
        let d = depth[s];
        for (from, to) in transitions {
            if *from == s && !terminal.get(to).copied().unwrap_or(true) && !depth.contains_key(to) {
                depth.insert(to, d + 1);
                queue.push_back(to);
            }
        }
    }
    // A non-terminal state nothing reaches still gets a column (the last one).
    let last = depth.values().copied().max().unwrap_or(0);
    let mut columns: Vec<Vec<&'static str>> = vec![Vec::new(); last + 2];
    for (s, t) in states {
        if !t {
            let d = depth.get(s).copied().unwrap_or(last + 1);
            columns[d].push(s);
        }
    }
    columns.retain(|c| !c.is_empty());
    let tallest = columns.iter().map(Vec::len).max().unwrap_or(1) as f64;
    let mut at = HashMap::new();
    for (c, column) in columns.iter().enumerate() {
        // Centred vertically against the tallest column.
        let offset = (tallest - column.len() as f64) * ROW / 2.0;
        for (r, s) in column.iter().enumerate() {
            at.insert(
                *s,
                (
                    MARGIN + NODE_W / 2.0 + c as f64 * COL,
                    MARGIN + NODE_H / 2.0 + offset + r as f64 * ROW,
                ),
            );
        }
    }
    let width = MARGIN * 2.0 + NODE_W + (columns.len().max(1) - 1) as f64 * COL;
    let terminals: Vec<&'static str> = states.iter().filter(|(_, t)| *t).map(|(s, _)| *s).collect();
    let terminal_y = MARGIN + NODE_H / 2.0 + tallest * ROW + ROW * 0.6;
    let span = width - MARGIN * 2.0 - NODE_W;
    for (i, s) in terminals.iter().enumerate() {
        let x = match terminals.len() {
            1 => width / 2.0,
            n => MARGIN + NODE_W / 2.0 + span * i as f64 / (n - 1) as f64,
        };
        at.insert(*s, (x, terminal_y));
    }
    let height = if terminals.is_empty() {
        MARGIN * 2.0 + tallest * ROW
    } else {
        terminal_y + NODE_H / 2.0 + MARGIN
    };
    Layout { at, width, height }
}

/// Where the segment from the centre of a node towards `(dx, dy)` leaves its box.
fn exit(dx: f64, dy: f64) -> f64 {
    let tx = if dx == 0.0 {
        f64::INFINITY
    } else {
        (NODE_W / 2.0 + 4.0) / dx.abs()
    };
    let ty = if dy == 0.0 {
        f64::INFINITY
    } else {
        (NODE_H / 2.0 + 4.0) / dy.abs()
    };
    tx.min(ty)
}

/// The SVG of the machine with `path` (the run's transitions in order) drawn on it;
/// `current` is the state the run is in.
pub fn svg(
    states: &[(&'static str, bool)],
    transitions: &[(&'static str, &'static str)],
    path: &[(String, String)],
    current: &str,
) -> String {
    let l = layout(states, transitions);
    let mut taken: HashMap<(&str, &str), usize> = HashMap::new();
    for (from, to) in path {
        *taken.entry((from.as_str(), to.as_str())).or_default() += 1;
    }
    let visited: std::collections::HashSet<&str> = path
        .iter()
        .flat_map(|(f, t)| [f.as_str(), t.as_str()])
        .chain(std::iter::once(current))
        .collect();
    let route: Vec<&str> = path
        .first()
        .map(|(f, _)| f.as_str())
        .into_iter()
        .chain(path.iter().map(|(_, t)| t.as_str()))
        .collect();
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"machine\" viewBox=\"0 0 {w:.0} {h:.0}\" width=\"{w:.0}\" height=\"{h:.0}\" role=\"img\" aria-labelledby=\"machine-title machine-desc\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title id=\"machine-title\">The run state machine, this run's path highlighted</title>\
         <desc id=\"machine-desc\">{desc}</desc>\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#8a8f98\"/></marker>\
         <marker id=\"arrow-taken\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"5\" markerHeight=\"5\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#1d4ed8\"/></marker></defs>",
        w = l.width,
        h = l.height,
        desc = esc(&if route.is_empty() {
            "The run has not moved yet.".to_string()
        } else {
            format!("Path: {}.", route.join(" → "))
        }),
    );
    // Untaken edges first, so taken ones draw over them.
    let mut edges: Vec<(&str, &str, usize)> = transitions
        .iter()
        .map(|(f, t)| (*f, *t, taken.get(&(*f, *t)).copied().unwrap_or(0)))
        .collect();
    edges.sort_by_key(|e| e.2 > 0);
    for (from, to, count) in edges {
        let (Some(&(x1, y1)), Some(&(x2, y2))) = (l.at.get(from), l.at.get(to)) else {
            continue;
        };
        let (dx, dy) = (x2 - x1, y2 - y1);
        let len = (dx * dx + dy * dy).sqrt().max(1.0);
        // Bend every edge a little to its left: A→B and B→A do not overlap.
        let bend = 14.0;
        let (nx, ny) = (-dy / len * bend, dx / len * bend);
        let (sx, sy) = (
            x1 + dx * exit(dx, dy) + nx * 0.5,
            y1 + dy * exit(dx, dy) + ny * 0.5,
        );
        let (ex, ey) = (
            x2 - dx * exit(dx, dy) + nx * 0.5,
            y2 - dy * exit(dx, dy) + ny * 0.5,
        );
        let (cx, cy) = ((sx + ex) / 2.0 + nx, (sy + ey) / 2.0 + ny);
        let class = if count > 0 { "edge taken" } else { "edge" };
        let marker = if count > 0 { "arrow-taken" } else { "arrow" };
        let _ = write!(
            out,
            "<path class=\"{class}\" data-from=\"{f}\" data-to=\"{t}\" d=\"M{sx:.1},{sy:.1} Q{cx:.1},{cy:.1} {ex:.1},{ey:.1}\" marker-end=\"url(#{marker})\"/>",
            f = esc(from),
            t = esc(to),
        );
        if count > 1 {
            let _ = write!(
                out,
                "<text class=\"count\" x=\"{cx:.1}\" y=\"{cy:.1}\">×{count}</text>"
            );
        }
    }
    for (state, terminal) in states {
        let Some(&(x, y)) = l.at.get(state) else {
            continue;
        };
        let mut class = String::from("node");
        if *terminal {
            class.push_str(" terminal");
        }
        if visited.contains(state) {
            class.push_str(" visited");
        }
        if *state == current {
            class.push_str(" current");
        }
        let _ = write!(
            out,
            "<g class=\"{class}\" data-state=\"{s}\"><rect x=\"{rx:.1}\" y=\"{ry:.1}\" width=\"{NODE_W}\" height=\"{NODE_H}\" rx=\"8\"/>\
             <text x=\"{x:.1}\" y=\"{ty:.1}\">{s}</text></g>",
            s = esc(state),
            rx = x - NODE_W / 2.0,
            ry = y - NODE_H / 2.0,
            ty = y + 4.5,
        );
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATES: &[(&str, bool)] = &[
        ("created", false),
        ("planning", false),
        ("acting", false),
        ("done", true),
        ("failed", true),
    ];
    const TRANSITIONS: &[(&str, &str)] = &[
        ("created", "planning"),
        ("planning", "acting"),
        ("acting", "planning"),
        ("planning", "done"),
        ("acting", "failed"),
    ];

    #[test]
    fn every_state_and_transition_is_drawn_and_only_the_path_is_highlighted() {
        let path = vec![
            ("created".to_string(), "planning".to_string()),
            ("planning".to_string(), "acting".to_string()),
            ("acting".to_string(), "planning".to_string()),
            ("planning".to_string(), "acting".to_string()),
            ("acting".to_string(), "planning".to_string()),
            ("planning".to_string(), "done".to_string()),
        ];
        let svg = svg(STATES, TRANSITIONS, &path, "done");
        for (s, _) in STATES {
            assert!(svg.contains(&format!("data-state=\"{s}\"")), "{s}");
        }
        assert_eq!(svg.matches("<path class=\"edge").count(), TRANSITIONS.len());
        assert_eq!(svg.matches("class=\"edge taken\"").count(), 4);
        assert!(svg.contains("data-from=\"acting\" data-to=\"failed\""));
        assert!(!svg.contains("class=\"edge taken\" data-from=\"acting\" data-to=\"failed\""));
        assert!(svg.contains("×2"), "a loop taken twice is counted");
        assert!(svg.contains("class=\"node terminal visited current\" data-state=\"done\""));
        assert!(svg.contains("class=\"node terminal\" data-state=\"failed\""));
        assert!(
            svg.contains(
                "Path: created → planning → acting → planning → acting → planning → done."
            )
        );
    }

    #[test]
    fn columns_follow_the_distance_from_the_initial_state() {
        let l = layout(STATES, TRANSITIONS);
        let x = |s: &str| l.at[s].0;
        assert!(x("created") < x("planning") && x("planning") < x("acting"));
        assert!(
            l.at["done"].1 > l.at["acting"].1,
            "terminal states sit beneath"
        );
    }
}
