// Runs the JavaScript of PyTorch's memory viewer on a snapshot written by `cuguard export`
// (cuguard::export::memory_viz), in Node, without a browser or the network.
//
//     node scripts/memory_viz_node.mjs PATH/TO/torch/utils/viz SNAPSHOT.pickle
//
// From MemoryViz.js in that folder it takes, by their text, the functions the viewer runs on a
// file before drawing it: its unpickler (`unpickleData`, `unpickle` in older versions),
// `version_space` and `annotate_snapshot`; and `process_alloc_data` (in process_alloc_data.js
// beside it, or in MemoryViz.js in older versions), which builds the Active Memory Timeline and
// the Active Cached Segment Timeline. It runs them for every device, fails with their error if
// one fails (or if a block's address as the viewer tiles it is not the one written), and prints
// per device the elements and the peak each timeline has.
// (A function is taken from `function NAME(` to the first line that is just `}`: the layout of
// those files, formatted by prettier.)

import fs from 'node:fs';
import path from 'node:path';

const [dir, snapshotPath] = process.argv.slice(2);
if (!dir || !snapshotPath) {
  console.error('usage: node memory_viz_node.mjs PATH/TO/torch/utils/viz SNAPSHOT.pickle');
  process.exit(2);
}

function take(source, name) {
  const start = source.indexOf(`function ${name}(`);
  if (start < 0) return null;
  const end = source.indexOf('\n}\n', start);
  return source.slice(start, end + 2);
}

const viz = fs.readFileSync(path.join(dir, 'MemoryViz.js'), 'utf8');
const extra = path.join(dir, 'process_alloc_data.js');
const helpers = fs.existsSync(extra)
  ? fs.readFileSync(extra, 'utf8').replace(/^export\s*\{[^}]*\};?\s*$/m, '')
  : '';
const unpicklerName = take(viz, 'unpickleData') ? 'unpickleData' : 'unpickle';
const parts = [unpicklerName, 'version_space', 'annotate_snapshot'].map(n => {
  const f = take(viz, n);
  if (!f) throw new Error(`MemoryViz.js has no function ${n}`);
  return f;
});
if (!helpers) parts.push(take(viz, 'process_alloc_data'));
const run = new Function(
  'buffer',
  `${helpers}\n${parts.join('\n')}\n` +
    `const snapshot = ${unpicklerName}(buffer);\n` +
    'annotate_snapshot(snapshot);\n' +
    'return [snapshot, process_alloc_data];',
);

const bytes = fs.readFileSync(snapshotPath);
const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
const [snapshot, processAllocData] = run(buffer);
// annotate_snapshot gives each block the address the tiling says; it must be the one written.
for (const seg of snapshot.segments) {
  for (const b of seg.blocks) {
    if (b.addr !== b.address) {
      throw new Error(`a block at ${b.address} is tiled at ${b.addr}`);
    }
  }
}
const report = [];
for (const [device, trace] of snapshot.device_traces.entries()) {
  const timeline = processAllocData(snapshot, device, false, 15000);
  const segments = processAllocData(snapshot, device, true, 15000);
  report.push({
    device,
    events: trace.length,
    allocations: timeline.elements_length,
    peak: Math.max(0, ...timeline.max_at_time),
    segments: segments.elements_length,
    reserved_peak: Math.max(0, ...segments.max_at_time),
  });
}
console.log(JSON.stringify(report));
