// DOM helpers.  Text always goes in as text (never as HTML), so nothing a
// model name or a log line holds can run in the console.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'style') el.style.cssText = v; // CSSOM: allowed by the CSP, unlike a style attribute
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function svg(tag, attrs = {}) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

export function say(message, isError = false) {
  const box = document.getElementById('status');
  // the same message again (a button pressed twice) is said once, for longer
  for (const old of box.children)
    if (old.textContent === message && old.classList.contains('error') === isError) old.remove();
  // errors interrupt a screen reader (alert); other news waits its turn (the box is polite)
  const d = h('div', { class: isError ? 'error' : '', role: isError ? 'alert' : undefined }, message);
  box.append(d);
  setTimeout(() => d.remove(), isError ? 12000 : 5000);
}

// Errors belong to the page that caused them: the next page starts clean.
export function clearErrors() {
  for (const d of [...document.querySelectorAll('#status .error')]) d.remove();
}

// Mark the control of form that a refusal names (its field, or the last
// part of a dotted one: "placement.threads"), with the reason beside it;
// the mark goes when the control is edited.  1 when one was marked.
function markField(form, fieldName, message) {
  if (!form || !fieldName) return 0;
  const control = form.elements.namedItem(fieldName) || form.elements.namedItem(fieldName.split('.').pop());
  if (!control || !control.id) return 0;
  const id = `${control.id}-error`;
  let note = document.getElementById(id);
  if (!note) {
    note = h('div', { class: 'error-text field-error', id });
    control.insertAdjacentElement('afterend', note);
  }
  note.textContent = message;
  control.setAttribute('aria-invalid', 'true');
  control.setAttribute('aria-describedby', id);
  control.addEventListener('input', () => {
    control.removeAttribute('aria-invalid');
    control.removeAttribute('aria-describedby');
    note.remove();
  }, { once: true });
  control.focus();
  return 1;
}

// A secret shown once (a token, a key, a command), with a button that
// copies it.
export function secret(text, attrs = {}) {
  const box = h('div', { class: 'secret', ...attrs }, text);
  const copy = h('button', { type: 'button', class: 'secondary copy', 'aria-label': `Copy ${attrs['aria-label'] || 'it'}`,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        say('Copied');
      } catch {
        // no clipboard (a plain-http console): select it for the user to copy
        const range = document.createRange();
        range.selectNodeContents(box);
        getSelection().removeAllRanges();
        getSelection().addRange(range);
        say('Selected: press Ctrl+C to copy');
      }
    } }, 'Copy');
  return h('div', { class: 'secret-row' }, box, copy);
}

export function badge(state) {
  return h('span', { class: `badge ${state}` }, state);
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

export function when(t) {
  return t ? new Date(t * 1000).toLocaleString() : '—';
}

// How each table is sorted and which page it shows, by caption: pages
// redraw their tables every few seconds, and the reader's choice stays.
const tableState = new Map();
const PAGE_ROWS = 50;

// A cell's text, to sort by: the column's sort(row), else what it shows.
function cellText(c, r) {
  const v = c.sort ? c.sort(r) : c.value(r);
  if (typeof v === 'number') return v;
  const holder = h('span', {}, v);
  return holder.textContent;
}

// A table: columns [{label, value(row) -> node|string, sort?(row) ->
// number|string, or sort: false}].  A column header sorts by it (again:
// the other way); past opts.pageRows rows (50) it pages; past 5 rows a
// filter box keeps the rows with its words in any cell.
export function table(caption, columns, rows, empty = 'None yet.', opts = {}) {
  const pageRows = opts.pageRows || PAGE_ROWS;
  if (!rows.length) return h('p', { class: 'muted' }, empty);
  const st = tableState.get(caption) || { col: -1, dir: 1, page: 0, filter: '' };
  tableState.set(caption, st);
  const wrap = h('div', { class: 'table' });
  const filterable = rows.length > 5 && opts.filter !== false;
  // a page redrawing its table every few seconds must not take the box
  // from someone typing in it
  const typing = filterable && document.activeElement?.dataset?.filter === caption;
  const box = filterable ? h('input', { type: 'search', class: 'filter', 'data-filter': caption, value: st.filter,
    'aria-label': `Filter ${caption}`, placeholder: 'Filter' }) : null;
  const texts = new Map();
  const rowText = (r) => {
    if (!texts.has(r)) texts.set(r, columns.map((c) => String(cellText({ value: c.value }, r))).join(' ').toLowerCase());
    return texts.get(r);
  };
  function draw() {
    const words = st.filter.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = words.length ? rows.filter((r) => words.every((w) => rowText(r).includes(w))) : rows;
    if (st.col >= 0 && st.col < columns.length) {
      const c = columns[st.col];
      const keyed = shown.map((r) => [cellText(c, r), r]);
      keyed.sort((a, b) => st.dir * (typeof a[0] === 'number' && typeof b[0] === 'number' ? a[0] - b[0]
        : String(a[0]).localeCompare(String(b[0]), undefined, { numeric: true })));
      shown = keyed.map((k) => k[1]);
    }
    const pages = Math.max(1, Math.ceil(shown.length / pageRows));
    st.page = Math.min(st.page, pages - 1);
    const from = st.page * pageRows;
    const head = columns.map((c, i) => {
      if (c.sort === false || c.label === 'Actions') return h('th', { scope: 'col' }, c.label);
      const sorted = st.col === i;
      return h('th', { scope: 'col', 'aria-sort': sorted ? (st.dir > 0 ? 'ascending' : 'descending') : 'none' },
        h('button', { type: 'button', class: 'sort', onclick: () => {
          st.dir = sorted ? -st.dir : 1;
          st.col = i;
          draw();
        } }, c.label, sorted ? (st.dir > 0 ? ' ▲' : ' ▼') : ''));
    });
    const parts = [...(box ? [box] : []), shown.length ? '' : h('p', { class: 'muted' }, 'No row has those words.'), h('table', {},
      h('caption', { class: 'muted', style: 'text-align:left' }, caption),
      h('thead', {}, h('tr', {}, head)),
      h('tbody', {}, shown.slice(from, from + pageRows).map((r) => h('tr', {}, columns.map((c) => h('td', {}, c.value(r)))))))];
    if (pages > 1)
      parts.push(h('div', { class: 'pager', role: 'group', 'aria-label': `Pages of ${caption}` },
        h('button', { type: 'button', class: 'secondary', disabled: st.page === 0, onclick: () => { st.page--; draw(); } }, 'Previous'),
        h('span', {}, ` ${from + 1}–${Math.min(from + pageRows, shown.length)} of ${shown.length} `),
        h('button', { type: 'button', class: 'secondary', disabled: st.page >= pages - 1, onclick: () => { st.page++; draw(); } }, 'Next')));
    wrap.replaceChildren(...parts);
  }
  if (box) {
    box.addEventListener('input', () => {
      st.filter = box.value;
      st.page = 0;
      const at = box.selectionStart;
      draw();
      box.focus();
      box.setSelectionRange(at, at);
    });
    if (typing) queueMicrotask(() => { box.focus(); box.setSelectionRange(box.value.length, box.value.length); });
  }
  draw();
  return wrap;
}

// A small line chart of the last values, drawn as SVG.
export function sparkline(label, values) {
  const w = 300, ht = 60;
  const s = svg('svg', { class: 'spark', viewBox: `0 0 ${w} ${ht}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': label });
  if (values.length > 1) {
    const max = Math.max(...values, 1e-9);
    const d = values.map((v, i) => `${i ? 'L' : 'M'}${(i * w) / (values.length - 1)},${ht - 4 - (v / max) * (ht - 8)}`).join('');
    s.append(svg('path', { d }));
  }
  return s;
}

// A form's fields by name; numbers as numbers, empty fields left out.
export function formValues(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name || el.value === '') continue;
    out[el.name] = el.type === 'number' ? Number(el.value) : el.type === 'checkbox' ? el.checked : el.value;
  }
  return out;
}

// Run an action from a button: disabled while it runs, errors said aloud.
export async function act(button, fn, done) {
  if (button) button.disabled = true;
  try {
    const r = await fn();
    if (done) say(done);
    return r;
  } catch (e) {
    markField(button?.form, e.field, e.message);
    say(e.field ? `${e.message} (${e.field})` : e.message, true);
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

// A labelled control: the label names only the control (a label wrapped
// around a select would also read out its options).
let fieldSeq = 0;
export function field(text, control, attrs = {}) {
  if (!control.id) control.id = `f${++fieldSeq}`;
  return h('div', { class: 'field', ...attrs }, h('label', { for: control.id }, text), control);
}
