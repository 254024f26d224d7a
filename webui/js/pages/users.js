// Users (admins only) and everyone's own API tokens.
import { api } from '../api.js';
import { h, table, act, formValues, when, field, secret } from '../ui.js';
import { can } from '../session.js';

async function usersSection(main) {
  const list = h('div', {});
  async function refresh() {
    const r = await api('GET', '/api/v1/users');
    list.replaceChildren(table('Users', [
      { label: 'Name', value: (u) => u.name },
      { label: 'Role', value: (u) => h('select', { 'aria-label': `Role of ${u.name}`, onchange: (e) => {
        if (!confirm(`Make ${u.name} ${e.target.value === 'admin' ? 'an' : 'a'} ${e.target.value}?`)) { e.target.value = u.role; return; }
        act(null, async () => { await api('PATCH', `/api/v1/users/${u.id}`, { role: e.target.value }); refresh(); }, 'Role changed');
      } },
        ['viewer', 'operator', 'admin'].map((x) => h('option', { selected: x === u.role }, x))) },
      { label: 'Created', value: (u) => when(u.created_at) },
      { label: 'Actions', value: (u) => h('button', { type: 'button', class: 'danger', 'aria-label': `Delete user ${u.name}`,
        onclick: (e) => confirm(`Delete user ${u.name}?`) && act(e.target, async () => { await api('DELETE', `/api/v1/users/${u.id}`); refresh(); }, 'User deleted') }, 'Delete') },
    ], r.data));
  }
  const form = h('form', { class: 'inline', 'aria-label': 'New user' },
    field('Name', h('input', { name: 'name', required: true, maxlength: 64, autocomplete: 'off' })),
    field('Password (12+ characters)', h('input', { name: 'password', type: 'password', minlength: 12, required: true, autocomplete: 'new-password' })),
    field('Role', h('select', { name: 'role' }, ['viewer', 'operator', 'admin'].map((x) => h('option', {}, x)))),
    h('button', { type: 'submit' }, 'Add user'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    act(form.querySelector('button'), async () => { await api('POST', '/api/v1/users', formValues(form)); form.reset(); refresh(); }, 'User added');
  });
  main.append(h('h2', {}, 'Users'), h('div', { class: 'card' }, form), list);
  await refresh();
}

async function tokensSection(main, me) {
  const list = h('div', {});
  const out = h('div', { 'aria-live': 'polite' });
  async function refresh() {
    const r = await api('GET', '/api/v1/tokens');
    list.replaceChildren(table('API tokens', [
      { label: 'Name', value: (t) => t.name }, { label: 'Scopes', value: (t) => t.scopes },
      { label: 'Expires', value: (t) => when(t.expires_at) }, { label: 'Last used', value: (t) => when(t.last_used_at) },
      { label: 'Revoked', value: (t) => when(t.revoked_at) },
      { label: 'Actions', value: (t) => t.revoked_at ? '' : h('button', { type: 'button', class: 'danger', 'aria-label': `Revoke token ${t.name}`,
        onclick: (e) => confirm(`Revoke token ${t.name}? Whatever uses it stops working.`) &&
          act(e.target, async () => { await api('DELETE', `/api/v1/tokens/${t.id}`); refresh(); }, 'Token revoked') }, 'Revoke') },
    ], r.data));
  }
  const scopes = ['read', ...(can('operator') ? ['write'] : []), ...(can('admin') ? ['admin'] : [])];
  const form = h('form', { class: 'inline', 'aria-label': 'New API token' },
    field('Name', h('input', { name: 'name', required: true, maxlength: 64 })),
    field('Scope', h('select', { name: 'scopes' }, scopes.map((s) => h('option', {}, s)))),
    field('Expires in (days)', h('input', { name: 'expires_in_days', type: 'number', min: 1, max: 3650, value: 90 })),
    h('button', { type: 'submit' }, 'Create token'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    act(form.querySelector('button'), async () => {
      // the API takes scopes as a list; the form picks the widest one
      const v = formValues(form);
      const t = await api('POST', '/api/v1/tokens', { ...v, scopes: [v.scopes] });
      out.replaceChildren(h('p', {}, 'New token (shown once; use it as "Authorization: Bearer ..."):'),
        secret(t.token, { 'aria-label': 'the new token' }));
      form.reset();
      refresh();
    });
  });
  main.append(h('h2', {}, `API tokens of ${me.user.name}`), h('div', { class: 'card' }, form, out), list);
  await refresh();
}

export default async function users(main, ctx) {
  if (can('admin')) await usersSection(main);
  await tokensSection(main, ctx.me);
}
