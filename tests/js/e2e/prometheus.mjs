// A strict reader of the Prometheus text exposition format 0.0.4, written from the format's
// published description (prometheus.io/docs/instrumenting/exposition_formats), independent of the
// server: every line must be a HELP, TYPE or sample line; a sample's family must have been typed;
// label values use the format's escapes; histograms have cumulative buckets ending in +Inf that
// equal _count. Throws on the first violation, naming the line.

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const LABEL = '[a-zA-Z_][a-zA-Z0-9_]*';
const VALUE = '(?:[+-]?(?:Inf|NaN)|[+-]?(?:\\d+\\.?\\d*|\\.\\d+)(?:[eE][+-]?\\d+)?)';
const SAMPLE = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (${VALUE})(?: -?\\d+)?$`);
const LABEL_PAIR = new RegExp(`^(${LABEL})="((?:[^"\\\\\\n]|\\\\[\\\\"n])*)"`);

function parseLabels(text, where) {
  const labels = {};
  let rest = text;
  while (rest.length > 0) {
    const m = rest.match(LABEL_PAIR);
    if (!m) throw new Error(`${where}: bad label syntax at '${rest}'`);
    if (m[1] in labels) throw new Error(`${where}: label ${m[1]} repeated`);
    labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    rest = rest.slice(m[0].length);
    if (rest.startsWith(',')) rest = rest.slice(1);
    else if (rest.length > 0) throw new Error(`${where}: expected ',' at '${rest}'`);
  }
  return labels;
}

const parseValue = (v) => (v.endsWith('Inf') ? (v.startsWith('-') ? -Infinity : Infinity) : Number(v));

// Returns { families: Map(name -> {type, help, samples: [{name, labels, value}]}) }.
export function parsePrometheus(text) {
  if (!text.endsWith('\n')) throw new Error('the exposition must end with a newline');
  const families = new Map();
  const family = (name) => {
    if (!families.has(name)) families.set(name, { type: null, help: null, samples: [] });
    return families.get(name);
  };
  const lines = text.split('\n').slice(0, -1);
  lines.forEach((line, i) => {
    const where = `line ${i + 1} '${line}'`;
    if (line.startsWith('#')) {
      const m = line.match(new RegExp(`^# (HELP|TYPE) (${NAME}) (.*)$`));
      if (!m) {
        if (/^# (HELP|TYPE)/.test(line)) throw new Error(`${where}: malformed ${line.slice(2, 6)}`);
        return; // other comments are allowed
      }
      const f = family(m[2]);
      if (m[1] === 'TYPE') {
        if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(m[3])) throw new Error(`${where}: unknown type`);
        if (f.type || f.samples.length) throw new Error(`${where}: TYPE after samples or twice`);
        f.type = m[3];
      } else {
        f.help = m[3];
      }
      return;
    }
    if (line.trim() === '') throw new Error(`${where}: blank line`);
    const m = line.match(SAMPLE);
    if (!m) throw new Error(`${where}: not a sample line`);
    const name = m[1];
    const base = [...families.keys()].find((f) => families.get(f).type === 'histogram' && /^(.*)_(bucket|sum|count)$/.test(name) && name.replace(/_(bucket|sum|count)$/, '') === f) ?? name;
    const f = families.get(base);
    if (!f || !f.type) throw new Error(`${where}: sample of an untyped family ${base}`);
    const value = parseValue(m[3]);
    if (Number.isNaN(value) && !m[3].endsWith('NaN')) throw new Error(`${where}: bad value`);
    if (f.type === 'counter' && !(value >= 0)) throw new Error(`${where}: negative counter`);
    f.samples.push({ name, labels: parseLabels(m[2] ?? '', where), value });
  });
  for (const [name, f] of families) {
    if (f.type !== 'histogram') continue;
    const buckets = f.samples.filter((s) => s.name === `${name}_bucket`);
    const count = f.samples.find((s) => s.name === `${name}_count`);
    const sum = f.samples.find((s) => s.name === `${name}_sum`);
    if (!count || !sum || buckets.length === 0) throw new Error(`${name}: histogram lacks _bucket, _sum or _count`);
    let prevLe = -Infinity;
    let prev = 0;
    for (const b of buckets) {
      const le = parseValue(b.labels.le ?? 'x');
      if (!(le > prevLe)) throw new Error(`${name}: bucket bounds not increasing at le=${b.labels.le}`);
      if (b.value < prev) throw new Error(`${name}: buckets not cumulative at le=${b.labels.le}`);
      prevLe = le;
      prev = b.value;
    }
    if (prevLe !== Infinity) throw new Error(`${name}: last bucket is not +Inf`);
    if (prev !== count.value) throw new Error(`${name}: +Inf bucket ${prev} != _count ${count.value}`);
  }
  return { families };
}

// Sum of the samples named `name` whose labels include every pair of `match`.
export function sample(parsed, name, match = {}) {
  let total = 0;
  for (const f of parsed.families.values())
    for (const s of f.samples)
      if (s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value;
  return total;
}
