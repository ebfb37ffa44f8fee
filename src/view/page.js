// Renders the charts and the flame graph of a cuguard view page from the JSON in #data.
// No network: everything the page needs is in the page.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  function fmt(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"], i = 0, v = b;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return i ? v.toFixed(1) + " " + u[i] : b + " B";
  }
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, anchor) {
    var t = svg("text", { x: x, y: y, "text-anchor": anchor || "start" }, parent);
    t.textContent = s;
  }
  function chart(c, into) {
    var W = 520, H = 180, L = 64, B = 22, T = 10, R = 12;
    var tmax = 1, ymax = 1;
    c.points.forEach(function (p) { tmax = Math.max(tmax, p[0]); ymax = Math.max(ymax, p[1], p[2]); });
    var x = function (t) { return L + (W - L - R) * t / tmax; };
    var y = function (v) { return H - B - (H - B - T) * v / ymax; };
    var fig = document.createElement("figure");
    var s = svg("svg", { "class": "timeline", viewBox: "0 0 " + W + " " + H, width: W, height: H }, fig);
    svg("line", { "class": "axis", x1: L, y1: T, x2: L, y2: H - B }, s);
    svg("line", { "class": "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }, s);
    text(s, L - 4, T + 8, fmt(ymax), "end");
    text(s, L - 4, H - B, "0", "end");
    text(s, L, H - 6, "0 ms");
    text(s, W - R, H - 6, tmax + " ms", "end");
    ["reserved", "live"].forEach(function (kind) {
      var col = kind === "live" ? 1 : 2;
      var pts = c.points.map(function (p) { return x(p[0]).toFixed(1) + "," + y(p[col]).toFixed(1); });
      if (pts.length === 1) pts.push((W - R) + "," + y(c.points[0][col]).toFixed(1));
      svg("polyline", { "class": kind, points: pts.join(" ") }, s);
    });
    var cap = document.createElement("figcaption");
    cap.textContent = c.process + " — device " + c.device + (c.name ? " (" + c.name + ")" : "");
    fig.appendChild(cap);
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
