// Renders the charts and the flame graph of a cuguard view page from the JSON in #data.
// No network: everything the page needs is in the page.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  // Sizes and times as `cuguard summary` prints them (3.0 MiB, 250 ms, 12.3 s).
  function fmt(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"], i = 0, v = b;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return i ? v.toFixed(1) + " " + u[i] : b + " B";
  }
  function ms(t) {
    if (t < 1000) return t + " ms";
    if (t < 3600000) return (t / 1000).toFixed(1) + " s";
    if (t < 86400000) return (t / 60000).toFixed(1) + " min";
    return (t / 3600000).toFixed(1) + " h";
  }
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, anchor, cls) {
    var attrs = { x: x, y: y, "text-anchor": anchor || "start" };
    if (cls) attrs["class"] = cls;
    var t = svg("text", attrs, parent);
    t.textContent = s;
    return t;
  }
  // Axes: grid lines at the largest value and half of it, times at each quarter of the run.
  function axes(s, W, H, L, B, T, R, tmax, ymax) {
    [1, 0.5].forEach(function (f) {
      var gy = H - B - (H - B - T) * f;
      svg("line", { "class": "grid", x1: L, y1: gy, x2: W - R, y2: gy }, s);
      text(s, L - 4, gy + 4, fmt(Math.round(ymax * f)), "end");
    });
    svg("line", { "class": "axis", x1: L, y1: T, x2: L, y2: H - B }, s);
    svg("line", { "class": "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }, s);
    text(s, L - 4, H - B + 4, "0", "end");
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var tx = L + (W - L - R) * f;
      svg("line", { "class": "axis", x1: tx, y1: H - B, x2: tx, y2: H - B + 3 }, s);
      text(s, tx, H - 6, f === 0 ? "0 ms" : ms(Math.round(tmax * f)), f === 0 ? "start" : f === 1 ? "end" : "middle");
    });
  }
  // A polyline through points [x, y]; a single point is drawn as a level line to the right edge.
  function line(s, pts, cls, right, colour) {
    var p = pts.map(function (q) { return q[0].toFixed(1) + "," + q[1].toFixed(1); });
    if (p.length === 1) p.push(right.toFixed(1) + "," + pts[0][1].toFixed(1));
    var attrs = { "class": cls, points: p.join(" ") };
    if (colour) attrs.stroke = colour;
    return svg("polyline", attrs, s);
  }
  // Charts with at most this many samples dot each one.
  var SPARSE = 60;
  function chart(c, into) {
    var W = 520, H = 200, L = 66, B = 22, T = 31, R = 12;
    var tmax = 1, ymax = 1, markers = c.markers || [];
    c.points.forEach(function (p) { tmax = Math.max(tmax, p[0]); ymax = Math.max(ymax, p[1], p[2]); });
    markers.forEach(function (m) { tmax = Math.max(tmax, m.time_ms); ymax = Math.max(ymax, m.live_bytes || 0); });
    var x = function (t) { return L + (W - L - R) * t / tmax; };
    var y = function (v) { return H - B - (H - B - T) * v / ymax; };
    var fig = document.createElement("figure");
    var s = svg("svg", { "class": "timeline", viewBox: "0 0 " + W + " " + H, width: W, height: H }, fig);
    axes(s, W, H, L, B, T, R, tmax, ymax);
    line(s, c.points.map(function (p) { return [x(p[0]), y(p[2])]; }), "reserved", W - R);
    // The live line passes through the samples and the marked moments, whose live bytes are
    // known exactly (a sample may have missed the peak).
    var live = c.points.map(function (p) { return [p[0], p[1]]; });
    markers.forEach(function (m) { live.push([m.time_ms, m.live_bytes || 0]); });
    live.sort(function (a, b) { return a[0] - b[0]; });
    line(s, live.map(function (p) { return [x(p[0]), y(p[1])]; }), "live", W - R);
    // Few samples: each is dotted, so that the lines between read as what they are.
    if (c.points.length <= SPARSE) {
      c.points.forEach(function (p) {
        svg("circle", { "class": "sample", cx: x(p[0]), cy: y(p[1]), r: 2 }, s);
      });
    }
    // Markers: a vertical line each and a dot at the live bytes then (the samples may have
    // missed the moment); its text at the top, or in a second row above where it would
    // overlap one already shown, else only in its title.
    var rows = [{ y: T - 7, taken: [] }, { y: T - 18, taken: [] }];
    markers.forEach(function (m) {
      var mx = x(m.time_ms);
      var l = svg("line", { "class": "marker " + m.kind, x1: mx, y1: T - 4, x2: mx, y2: H - B }, s);
      svg("title", {}, l).textContent = m.label;
      var dot = svg("circle", { "class": "dot " + m.kind, cx: mx, cy: y(m.live_bytes || 0), r: 3 }, s);
      svg("title", {}, dot).textContent = m.label;
      if (m.card && m.card.length) {
        // A refusal's marker: a click shows its card under the chart (and hides it again).
        var show = function () { toggleCard(fig, m); };
        [l, dot].forEach(function (el) { el.style.cursor = "pointer"; el.addEventListener("click", show); });
      }
      var width = m.short.length * 6, left;
      var anchor = "middle";
      if (mx + width / 2 > W - 2) { anchor = "end"; left = mx - width; }
      else if (mx - width / 2 < L) { anchor = "start"; left = mx; }
      else { left = mx - width / 2; }
      var row = rows.find(function (r) {
        return r.taken.every(function (span) { return left > span[1] + 4 || left + width + 4 < span[0]; });
      });
      if (row) {
        var t = text(s, mx, row.y, m.short, anchor, "marker-label " + m.kind);
        svg("title", {}, t).textContent = m.label;
        row.taken.push([left, left + width]);
      }
    });
    var cap = document.createElement("figcaption");
    cap.textContent = c.process + " — device " + c.device + (c.name ? " (" + c.name + ")" : "");
    fig.appendChild(cap);
    into.appendChild(fig);
  }
  // Shows marker m's card (its lines, the verdict first) under the chart in fig, or hides it
  // when it is the one shown.
  function toggleCard(fig, m) {
    var shown = fig.querySelector("pre.oom-card");
    var same = shown && shown.dataset.at === String(m.time_ms);
    if (shown) { shown.remove(); }
    if (same) { return; }
    var pre = document.createElement("pre");
    pre.className = "oom-card";
    pre.dataset.at = String(m.time_ms);
    pre.textContent = m.label + "\n" + m.card.join("\n");
    fig.appendChild(pre);
  }
  var SERIES = ["#1f5fbf", "#d9822b", "#2a9d8f", "#c0392b", "#8e44ad", "#7f8c8d", "#b8860b", "#e377c2"];
  // One process's top sites' live bytes over time, a line per site, labelled in a legend.
  function growthChart(g, into) {
    var W = 1000, H = 240, L = 70, B = 22, T = 12, R = 14;
    var times = g.times, tmax = 1, ymax = 1;
    times.forEach(function (t) { tmax = Math.max(tmax, t); });
    if (g.end_ms != null) tmax = Math.max(tmax, g.end_ms);
    g.lines.forEach(function (l) { l.bytes.forEach(function (b) { ymax = Math.max(ymax, b); }); });
    var x = function (t) { return L + (W - L - R) * t / tmax; };
    var y = function (v) { return H - B - (H - B - T) * v / ymax; };
    var fig = document.createElement("figure");
    fig.className = "wide";
    var s = svg("svg", { "class": "growth", viewBox: "0 0 " + W + " " + H, width: "100%" }, fig);
    axes(s, W, H, L, B, T, R, tmax, ymax);
    var legend = document.createElement("ul");
    legend.className = "series-legend";
    // Drawn last to first, so the first (most grown) lies on top.
    for (var i = g.lines.length - 1; i >= 0; i--) {
      var l = g.lines[i], colour = SERIES[i % SERIES.length];
      var pts = [];
      for (var k = 0; k < times.length && k < l.bytes.length; k++) pts.push([x(times[k]), y(l.bytes[k])]);
      var pl = line(s, pts, "series" + (l.growing ? " grows" : ""), W - R, colour);
      svg("title", {}, pl).textContent = l.label;
      if (times.length <= SPARSE) {
        pts.forEach(function (q) {
          svg("circle", { "class": "sample", cx: q[0], cy: q[1], r: 2, fill: colour }, s);
        });
      }
    }
    if (g.end_ms != null) {
      var ex = x(g.end_ms);
      // The end of a Python program's code: growth is judged up to it.
      var el = svg("line", { "class": "marker end", x1: ex, y1: T, x2: ex, y2: H - B }, s);
      svg("title", {}, el).textContent = "the end of the program's code at " + ms(g.end_ms) + ": growth is judged up to here; what follows is the interpreter's teardown";
      var right = ex + 70 > W - R;
      text(s, right ? ex - 3 : ex + 3, T + 10, "end of code", right ? "end" : "start", "marker-label end");
    }
    g.lines.forEach(function (l, i) {
      var li = document.createElement("li");
      var sw = document.createElement("span");
      sw.className = "key" + (l.growing ? " grows" : "");
      sw.style.borderColor = SERIES[i % SERIES.length];
      li.appendChild(sw);
      var name = document.createElement("span");
      name.className = "site";
      name.textContent = l.label;
      li.appendChild(name);
      var top = 0;
      l.bytes.forEach(function (b) { top = Math.max(top, b); });
      var note = document.createElement("span");
      note.className = "note";
      note.textContent = " up to " + fmt(top) + (l.growing ? ", grows" : "");
      li.appendChild(note);
      legend.appendChild(li);
    });
    fig.appendChild(legend);
    into.appendChild(fig);
  }
  function hue(name) {
    var h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return h;
  }
  function flame(root, box, top) {
    box.innerHTML = "";
    var total = root.v || 1, depth = 0;
    function walk(n, left, d) {
      var w = n.v / total * 100;
      if (w < 0.05) return;
      depth = Math.max(depth, d);
      var e = document.createElement("div");
      e.className = "frame";
      e.style.left = left + "%";
      e.style.width = w + "%";
      e.style.top = d * 18 + "px";
      var h = hue(n.n);
      e.style.background = "hsl(" + (h % 50 + 5) + ", 80%, " + (h % 20 + 60) + "%)";
      e.textContent = n.n;
      e.title = n.n + " — " + fmt(n.v) + " (" + (n.v / top.v * 100).toFixed(1) + "% of all leaked bytes)";
      e.onclick = function (ev) { ev.stopPropagation(); flame(n === root ? top : n, box, top); };
      box.appendChild(e);
      var x = left;
      (n.c || []).forEach(function (c) { walk(c, x, d + 1); x += c.v / total * 100; });
    }
    walk(root, 0, 0);
    box.style.height = (depth + 1) * 18 + "px";
  }

  // A phase's times: finer than ms() below a second (phases are often short).
  function msFine(t) {
    if (t >= 1000) return ms(t);
    return (t < 10 ? t.toFixed(2) : t.toFixed(1)) + " ms";
  }
  // The program's phases above the memory (see src/view/phases.rs): a band per phase in its
  // lane (by thread and depth), labelled where it fits; hover or click for its span and peak
  // (a click also lists what was live then). Returns null for a history without phases.
  var PHASE_LANE = 16;
  function phaseBands(t, W, L, R, tip, pick) {
    var ph = t.phases || [], more = t.phases_omitted || 0, lanes = 0;
    if (!ph.length && !more) return null;
    ph.forEach(function (p) { lanes = Math.max(lanes, p.lane + 1); });
    var H = lanes * PHASE_LANE + 2;
    var s = svg("svg", { "class": "history-phases", viewBox: "0 0 " + W + " " + H, width: W, height: H });
    var note = null;
    if (more) {
      note = document.createElement("p");
      note.className = "note phases-more";
      note.textContent = "… and " + more.toLocaleString("en-US") + " more phases, not drawn (the " + ph.length +
        " longest are, in at most 16 lanes; cuguard summary --by phase lists every one).";
    }
    function describe(p) {
      var end = p.end_ms == null ? t.ends_ms : p.end_ms;
      return p.label + ": " + msFine(p.start_ms) + " to " +
        (p.end_ms == null ? "the end (never ended)" : msFine(p.end_ms)) + " (" + msFine(end - p.start_ms) +
        "); peak " + fmt(p.peak_bytes) + " at " + msFine(p.peak_ms) + "; thread " + p.thread +
        (p.depth ? ", depth " + p.depth : "");
    }
    function draw(x, view) {
      while (s.firstChild) s.removeChild(s.firstChild);
      var shown = 0;
      ph.forEach(function (p) {
        var end = p.end_ms == null ? t.ends_ms : p.end_ms;
        if (end < view[0] || p.start_ms > view[1]) return;
        shown++;
        var x0 = Math.max(L, x(p.start_ms)), x1 = Math.min(W - R, x(end)), w = Math.max(1, x1 - x0);
        var y = p.lane * PHASE_LANE + 1, name = p.label.replace(/ #\d+$/, "");
        var g = svg("g", { "class": "phase", "data-label": p.label, "data-x": x0.toFixed(1) }, s);
        svg("rect", { x: x0.toFixed(1), y: y, width: w.toFixed(1), height: PHASE_LANE - 2,
          fill: "hsl(" + hue(name) % 360 + ", 45%, " + (p.end_ms == null ? 88 : 78) + "%)" }, g);
        var short = p.label.length * 6 + 6 <= w ? p.label : p.label.length > name.length &&
          (p.label.length - name.length) * 6 + 4 <= w ? p.label.slice(name.length + 1) : "";
        if (short) text(g, x0 + 3, y + 11, short, "start", "phase-label");
        svg("title", {}, g).textContent = describe(p);
        g.addEventListener("mouseenter", function () { tip.textContent = describe(p); });
        g.addEventListener("click", function () { pick(p); tip.textContent = describe(p); });
      });
      s.setAttribute("data-shown", String(shown));
    }
    return { svg: s, note: note, draw: draw };
  }

  // The active-memory timeline of one process's history (see src/view/timeline.rs): live bytes
  // stacked by site on a canvas, the program's phases above it and the largest allocations as
  // bands below, zoom by dragging, hover a band, click a moment. Each level's columns hold the series at the column's highest
  // moment; the finest level that covers the range shown is used.
  var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#a0cbe8", "#bab0ac"];
  function colour(k, n) { return k === n - 1 ? "#bab0ac" : PALETTE[k % (PALETTE.length - 1)]; }
  function history(t, into) {
    var n = t.series.length, W = 960, H = 240, L = 70, R = 12, T = 10, B = 22, LANE = 7;
    var view = [t.begins_ms, t.ends_ms];
    var area = document.createElement("canvas");
    area.width = W; area.height = H; area.className = "history-area";
    // ", on stream 0x5e8c30" for an allocation made on a stream other than the default.
    function onStream(b) { return b[4] ? ", on stream 0x" + b[4].toString(16) : ""; }
    // " [kv_cache]" for an allocation of band i the program tagged.
    function tagOf(i) { var k = t.band_tags ? t.band_tags[i] : 0; return k ? " [" + t.tags[k - 1] + "]" : ""; }
    var bandsC = document.createElement("canvas");
    var lanes = [], laneEnd = [];
    t.bands.forEach(function (b, i) {
      var end = b[1] < 0 ? t.ends_ms : b[1], l = 0;
      while (l < laneEnd.length && laneEnd[l] > b[0]) l++;
      if (l >= 40) { lanes.push(-1); return; }
      laneEnd[l] = end; lanes.push(l);
    });
    bandsC.width = W; bandsC.height = Math.max(1, laneEnd.length) * LANE + 4; bandsC.className = "history-bands";
    var tip = document.createElement("div"); tip.className = "history-tip";
    var list = document.createElement("div"); list.className = "history-at";
    var legend = document.createElement("div"); legend.className = "legend";
    t.series.forEach(function (s, k) {
      var e = document.createElement("span");
      e.style.borderLeft = "12px solid " + colour(k, n);
      e.style.paddingLeft = "4px"; e.style.marginRight = "10px";
      e.textContent = s.label;
      legend.appendChild(e);
    });
    var phases = phaseBands(t, W, L, R, tip, function (p) { show(p.peak_ms); });
    if (phases) { into.appendChild(phases.svg); if (phases.note) into.appendChild(phases.note); }
    into.appendChild(area); into.appendChild(bandsC); into.appendChild(tip);
    into.appendChild(legend); into.appendChild(list);
    function x(ms) { return L + (ms - view[0]) / Math.max(1e-9, view[1] - view[0]) * (W - L - R); }
    function at(px) { return view[0] + (px - L) / (W - L - R) * (view[1] - view[0]); }
    // The columns covering the range, from the finest level that holds all of it.
    function columns() {
      var fine = t.levels.slice(1).filter(function (l) { return l.to_ms > view[0] && l.from_ms < view[1]; });
      var width = view[1] - view[0], whole = t.ends_ms - t.begins_ms;
      var levels = fine.length && width <= whole / 4 ? fine : [t.levels[0]];
      var cols = [];
      levels.forEach(function (l) {
        for (var c = 0; c < l.at.length; c++) cols.push({ at: l.at[c], v: l.bytes.slice(c * n, c * n + n),
          from: l.from_ms + (l.to_ms - l.from_ms) * c / l.at.length, to: l.from_ms + (l.to_ms - l.from_ms) * (c + 1) / l.at.length });
      });
      return cols.filter(function (c) { return c.to >= view[0] && c.from <= view[1]; });
    }
    function draw() {
      var g = area.getContext("2d"), cols = columns(), ymax = 1;
      g.clearRect(0, 0, W, H);
      cols.forEach(function (c) { var s = 0; c.v.forEach(function (v) { s += v; }); ymax = Math.max(ymax, s); });
      var y = function (b) { return H - B - b / ymax * (H - B - T); };
      cols.forEach(function (c) {
        var x0 = Math.max(L, x(c.from)), x1 = Math.min(W - R, x(c.to)), base = 0;
        for (var k = 0; k < n; k++) {
          if (!c.v[k]) continue;
          g.fillStyle = colour(k, n);
          g.fillRect(Math.floor(x0), y(base + c.v[k]), Math.max(1, Math.ceil(x1) - Math.floor(x0)), y(base) - y(base + c.v[k]));
          base += c.v[k];
        }
      });
      g.strokeStyle = "#888"; g.beginPath(); g.moveTo(L, T); g.lineTo(L, H - B); g.lineTo(W - R, H - B); g.stroke();
      g.fillStyle = "#333"; g.font = "11px sans-serif"; g.textAlign = "right";
      g.fillText(fmt(ymax), L - 4, T + 8); g.fillText("0", L - 4, H - B);
      g.textAlign = "left"; g.fillText(ms(Math.round(view[0])), L, H - 6);
      g.textAlign = "right"; g.fillText(ms(Math.round(view[1])), W - R, H - 6);
      var h = bandsC.getContext("2d");
      h.clearRect(0, 0, W, bandsC.height);
      t.bands.forEach(function (b, i) {
        if (lanes[i] < 0) return;
        var end = b[1] < 0 ? t.ends_ms : b[1];
        if (end < view[0] || b[0] > view[1]) return;
        h.fillStyle = colour(b[3], n);
        var x0 = Math.max(L, x(b[0])), x1 = Math.min(W - R, x(end));
        h.fillRect(x0, lanes[i] * LANE + 2, Math.max(2, x1 - x0), LANE - 2);
      });
      if (phases) phases.draw(x, view);
      into.setAttribute("data-drawn", String(cols.length));
    }
    // What was live at a moment: the column's series, then the bands live then.
    function show(ms0) {
      var cols = columns(), best = null;
      cols.forEach(function (c) { if (c.from <= ms0 && ms0 <= c.to) best = c; });
      // A column's own moment (the peak, a phase's peak) is that column's: the bounds here are
      // worked out from rounded figures, and a moment at a boundary could fall in its neighbour,
      // whose moment may come before an allocation made at this one.
      cols.forEach(function (c) { if (c.at === ms0) best = c; });
      // At or past the history's end (a moment written rounded up, as `summary --at end`
      // gives it): what was live at the end, which nothing after it changes.
      if (!best && cols.length && ms0 > cols[cols.length - 1].to) best = cols[cols.length - 1];
      if (!best) return;
      list.textContent = "";
      var total = 0; best.v.forEach(function (v) { total += v; });
      var h = document.createElement("p");
      h.textContent = "live at " + ms(Math.round(best.at)) + ": " + fmt(total);
      // Events lost before this moment can change the answer: said, never hidden.
      var lostBefore = 0, lostLast = null;
      (t.lost || []).forEach(function (w) { if (w.from_ms <= best.at) { lostBefore += w.events; lostLast = w; } });
      if (lostBefore > 0) {
        // Inside a window, some of its events may be after this moment: at most that many.
        var upTo = best.at < lostLast.to_ms ? "up to " : "";
        h.textContent += " — NOT WHOLE: " + upTo + lostBefore + " events lost before this moment (the last at " +
          ms(Math.round(lostLast.from_ms)) + "–" + ms(Math.round(lostLast.to_ms)) +
          "): a row may hold an allocation freed in a lost window, or miss one made in it";
        h.className = "lost";
      }
      list.appendChild(h);
      var rows = best.v.map(function (v, k) { return [v, k]; }).filter(function (r) { return r[0] > 0; })
        .sort(function (a, b) { return b[0] - a[0]; });
      var tbl = document.createElement("table"); tbl.className = "history-list";
      rows.forEach(function (r) {
        var tr = document.createElement("tr"), s = t.series[r[1]];
        var a = document.createElement("td"); a.className = "num"; a.textContent = fmt(r[0]); tr.appendChild(a);
        var b = document.createElement("td"); b.textContent = s.label;
        if (s.stack && s.stack.length) { b.title = s.stack.join(" ← "); }
        tr.appendChild(b); tbl.appendChild(tr);
      });
      list.appendChild(tbl);
      var live = t.bands.map(function (b, i) { return i; })
        .filter(function (i) { var b = t.bands[i], e = b[1] < 0 ? Infinity : b[1]; return b[0] <= best.at && best.at < e; })
        .sort(function (i, j) { return t.bands[j][2] - t.bands[i][2]; }).slice(0, 10);
      if (live.length) {
        var p = document.createElement("p");
        p.textContent = "largest allocations then: " + live.map(function (i) {
          var b = t.bands[i];
          return fmt(b[2]) + " " + t.series[b[3]].label + tagOf(i) + " (from " + ms(Math.round(b[0])) + onStream(b) + ")";
        }).join(", ");
        list.appendChild(p);
      }
      into.setAttribute("data-shown", String(Math.round(best.at)));
    }
    var down = null;
    area.onmousedown = function (e) { down = e.offsetX; };
    area.onmouseup = function (e) {
      if (down !== null && Math.abs(e.offsetX - down) > 4) {
        var a = at(Math.min(down, e.offsetX)), b = at(Math.max(down, e.offsetX));
        view = [Math.max(t.begins_ms, a), Math.min(t.ends_ms, b)];
        draw();
      } else {
        show(at(e.offsetX));
      }
      down = null;
    };
    area.ondblclick = function () { view = [t.begins_ms, t.ends_ms]; draw(); };
    bandsC.onmousemove = function (e) {
      var lane = Math.floor((e.offsetY - 2) / LANE), ms0 = at(e.offsetX), hit = null, hitAt = -1;
      t.bands.forEach(function (b, i) {
        var end = b[1] < 0 ? t.ends_ms : b[1];
        if (lanes[i] === lane && b[0] <= ms0 && ms0 <= end) { hit = b; hitAt = i; }
      });
      if (!hit) { tip.textContent = ""; return; }
      var s = t.series[hit[3]];
      tip.textContent = fmt(hit[2]) + " from " + ms(Math.round(hit[0])) + " to " +
        (hit[1] < 0 ? "the end" : ms(Math.round(hit[1]))) + onStream(hit) + ": " + s.label + tagOf(hitAt) +
        (s.stack && s.stack.length ? " — " + s.stack.join(" ← ") : "");
    };
    draw();
    // A moment asked in the address (#at=MS): shown at once.
    var m = /(?:^#|&)at=([0-9.]+)/.exec(location.hash || "");
    show(m ? +m[1] : t.peak[0]);
  }
  // A page of many processes keeps every process's row gzip'd in #all-processes (see
  // processes.rs for its columns); opened only when asked, to find a process or show them all.
  var ROW = { index: 0, name: 1, worker: 2, rank: 3, host: 4, pid: 5, complete: 6, reason: 7,
    leaked: 8, own: 9, others: 10, peak: 11, leaks: 12, events: 13, source: 14, sites: 15 };
  var allRows = null;
  function rows() {
    if (allRows) return allRows;
    var b64 = document.getElementById("all-processes").textContent.replace(/\s+/g, "");
    var bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    allRows = new Response(stream).text().then(JSON.parse);
    return allRows;
  }
  function cell(tr, s, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = s;
    tr.appendChild(td);
    return td;
  }
  // The rows found as a table like the one above, each process's largest sites under it when
  // `sites` is set.
  function rowTable(found, sites) {
    var t = document.createElement("table");
    t.className = "found";
    var head = ["process", "worker", "rank", "host", "pid", "report", "leaked", "program's own", "others", "peak", "largest site"];
    var num = { rank: 1, pid: 1, leaked: 1, "program's own": 1, others: 1, peak: 1 };
    var tr = document.createElement("tr");
    head.forEach(function (h) {
      var th = document.createElement("th");
      if (num[h]) th.className = "num";
      th.textContent = h;
      tr.appendChild(th);
    });
    var thead = document.createElement("thead");
    thead.appendChild(tr);
    t.appendChild(thead);
    var body = document.createElement("tbody");
    found.forEach(function (r) {
      var tr = document.createElement("tr");
      tr.className = "found-process";
      tr.setAttribute("data-index", r[ROW.index]);
      tr.title = r[ROW.source];
      cell(tr, r[ROW.name]);
      cell(tr, r[ROW.worker] == null ? "" : r[ROW.worker]);
      cell(tr, r[ROW.rank] == null ? "" : String(r[ROW.rank]), "num");
      cell(tr, r[ROW.host]);
      cell(tr, String(r[ROW.pid]), "num");
      var rep = cell(tr, r[ROW.complete] ? "complete" : "incomplete (" + r[ROW.reason] + ")");
      if (!r[ROW.complete]) rep.className = "warn";
      cell(tr, fmt(r[ROW.leaked]), "num");
      cell(tr, fmt(r[ROW.own]), "num");
      cell(tr, fmt(r[ROW.others]), "num");
      cell(tr, fmt(r[ROW.peak]), "num");
      cell(tr, r[ROW.sites].length ? r[ROW.sites][0][2] : "", "site");
      body.appendChild(tr);
      if (sites && r[ROW.sites].length) {
        var sub = document.createElement("tr");
        sub.className = "found-sites";
        var td = document.createElement("td");
        td.colSpan = head.length;
        var p = document.createElement("div");
        p.className = "note";
        p.textContent = r[ROW.source] + ": " + fmt(r[ROW.leaked]) + " leaked in " + r[ROW.leaks] +
          (r[ROW.leaks] === 1 ? " leak" : " leaks") + "; its largest sites:";
        td.appendChild(p);
        r[ROW.sites].forEach(function (s) {
          var d = document.createElement("div");
          d.className = "site";
          d.textContent = fmt(s[0]) + " in " + s[1] + (s[1] === 1 ? " leak" : " leaks") + " — " + s[2];
          td.appendChild(d);
        });
        sub.appendChild(td);
        body.appendChild(sub);
      }
    });
    t.appendChild(body);
    return t;
  }
  // Whether row `r` answers the query: a number is a pid or a rank, `rank N` / `pid N` one of
  // them; other words are looked for in the name, worker, host and report file.
  function matches(r, q) {
    var m = /^(rank|pid)?\s*(\d+)$/.exec(q);
    if (m) {
      var n = +m[2];
      if (m[1] === "rank") return r[ROW.rank] === n;
      if (m[1] === "pid") return r[ROW.pid] === n;
      return r[ROW.pid] === n || r[ROW.rank] === n;
    }
    return [r[ROW.name], r[ROW.worker] || "", r[ROW.host], r[ROW.source]].some(function (s) {
      return s.toLowerCase().indexOf(q) >= 0;
    });
  }
  var SHOWN = 50;
  function finder() {
    var input = document.getElementById("find-process");
    if (!input) return;
    var out = document.getElementById("found"), note = document.getElementById("found-note");
    var asked = 0;
    function show(what, found, total, sites) {
      out.textContent = "";
      if (found.length) out.appendChild(rowTable(found, sites));
      note.textContent = what;
      out.setAttribute("data-found", String(total));
    }
    function fail(e) {
      note.textContent = "The list of processes could not be read: " + e;
      out.setAttribute("data-error", String(e));
    }
    function find(q) {
      var mine = ++asked;
      q = q.trim().toLowerCase();
      if (!q) { show("", [], 0, false); return; }
      rows().then(function (all) {
        if (mine !== asked) return;
        var found = all.filter(function (r) { return matches(r, q); });
        var n = found.length;
        show(n === 0 ? "No process matches." :
          n === 1 ? "1 process matches." :
          n + " processes match" + (n > SHOWN ? " (the first " + SHOWN + " shown)." : "."),
          found.slice(0, SHOWN), n, true);
      }, fail);
    }
    input.addEventListener("input", function () { find(input.value); });
    document.getElementById("show-all").addEventListener("click", function () {
      var mine = ++asked;
      note.textContent = "Opening…";
      rows().then(function (all) {
        if (mine !== asked) return;
        show("All " + all.length + " processes, in the order they were read.", all, all.length, false);
      }, fail);
    });
    // A search asked in the address (#find=rank%2042): run at once.
    var m = /(?:^#|&)find=([^&]*)/.exec(location.hash || "");
    if (m) {
      input.value = decodeURIComponent(m[1]);
      find(input.value);
    }
  }
  try {
    var data = JSON.parse(document.getElementById("data").textContent);
    var charts = document.getElementById("charts");
    if (data.charts.length === 0) {
      var p = document.createElement("p");
      p.className = "note";
      p.textContent = "These reports hold no timeline.";
      charts.appendChild(p);
    }
    data.charts.forEach(function (c) { chart(c, charts); });
    var slots = document.querySelectorAll("[data-growth]");
    for (var i = 0; i < slots.length; i++) {
      var g = (data.growth || [])[+slots[i].getAttribute("data-growth")];
      if (g) growthChart(g, slots[i]);
    }
    var hs = document.querySelectorAll("[data-timeline]");
    for (var j = 0; j < hs.length; j++) {
      var ht = (data.timelines || [])[+hs[j].getAttribute("data-timeline")];
      if (ht) history(ht, hs[j]);
    }
    var box = document.getElementById("flame");
    if (data.flame.v > 0) {
      flame(data.flame, box, data.flame);
    } else {
      box.textContent = "Nothing leaked.";
    }
    finder();
    document.body.setAttribute("data-rendered", "yes");
    document.body.setAttribute("data-drawn-ms", String(Math.round(performance.now())));
  } catch (e) {
    document.body.setAttribute("data-error", String(e));
  }
})();
