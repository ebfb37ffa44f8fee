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
    var box = document.getElementById("flame");
    if (data.flame.v > 0) {
      flame(data.flame, box, data.flame);
    } else {
      box.textContent = "Nothing leaked.";
    }
    document.body.setAttribute("data-rendered", "yes");
  } catch (e) {
    document.body.setAttribute("data-error", String(e));
  }
})();
