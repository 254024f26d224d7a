// A small Markdown reader for chat answers: fenced code blocks, paragraphs,
// bullet lists, `code`, **bold** and *emphasis*.  It builds DOM nodes from
// text only (never HTML), so nothing a model writes can run in the console.
import { h } from './ui.js';

// `code`, **bold**, *emphasis* in one line of text, as nodes.
function inline(text) {
  const out = [];
  const re = /(`[^`]+`|\*\*[^*]+\*\*|\*[^*\s][^*]*\*)/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) out.push(text.slice(last, m.index));
    const t = m[0];
    if (t[0] === '`') out.push(h('code', {}, t.slice(1, -1)));
    else if (t.startsWith('**')) out.push(h('strong', {}, t.slice(2, -2)));
    else out.push(h('em', {}, t.slice(1, -1)));
    last = m.index + t.length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

// The nodes for text, in a div.
export function markdown(text) {
  const box = h('div', { class: 'md' });
  const lines = text.split('\n');
  let para = [], list = null;
  const endPara = () => {
    if (para.length) box.append(h('p', {}, inline(para.join(' '))));
    para = [];
  };
  const endList = () => { if (list) box.append(list); list = null; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^```\s*([\w+-]*)\s*$/);
    if (fence) {
      endPara();
      endList();
      const code = [];
      for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) code.push(lines[i]);
      box.append(h('pre', { class: 'code', 'data-lang': fence[1] || undefined }, h('code', {}, code.join('\n'))));
      continue;
    }
    const item = line.match(/^\s*[-*]\s+(.*)$/);
    if (item) {
      endPara();
      if (!list) list = h('ul', {});
      list.append(h('li', {}, inline(item[1])));
    } else if (line.trim() === '') {
      endPara();
      endList();
    } else {
      endList();
      para.push(line.trim());
    }
  }
  endPara();
  endList();
  return box;
}
