// Single sign-on for the active organization (docs/sso.md): its verified e-mail domains and its
// own OpenID provider. Adding a domain gives a TXT record to publish; "Verify" asks DNS for it.
// In development the example's DNS stand-in (/dev/dns) publishes the record with one click, and
// the demo provider plays the company's identity provider, so the whole round trip runs offline.
// Signing in through the connection is on the sign-in page (pages/sso-return.js).
import { api, IdentityClientError } from '../lib/identity.js';
import { activeOrgOrHint } from '../lib/org.js';
import { actionButton, field, form, formatTime, h, section } from '../lib/ui.js';

/** A development helper's answer, or null (production mounts none of them). */
async function devData(path) {
  const response = await fetch(path);
  return response.ok ? (await response.json()).data : null;
}

/** Publishes a TXT record in the example's DNS stand-in, as you would at your DNS host. */
async function publishTxt(name, value) {
  const response = await fetch('/dev/dns/txt', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, value }) });
  if (!response.ok) throw new Error((await response.json()).errors?.join(' ') ?? `The DNS stand-in answered ${response.status}.`);
}

/** The connection's answer, or null when the organization has none yet (404). */
async function connectionOf(orgId) {
  try {
    return await api('GET', `/orgs/${orgId}/sso`);
  } catch (error) {
    if (error instanceof IdentityClientError && error.status === 404) return null;
    throw error;
  }
}

function checkbox(name, label, checked) {
  const id = `sso-${name}`;
  return h('div', { class: 'field' }, h('label', { for: id }, h('input', { type: 'checkbox', id, name, checked }), ` ${label}`));
}

function domainsSection(orgId, domains, { development, suggested, reload }) {
  const rows = domains.map((domain) =>
    h(
      'tr',
      {},
      h('td', {}, domain.domain),
      h('td', {}, h('strong', {}, domain.status)),
      h('td', {}, domain.status === 'verified' ? formatTime(domain.verified_at) : h('span', {}, h('code', {}, domain.txt_name), ' = ', h('code', { style: 'word-break: break-all' }, domain.txt_value))),
      h(
        'td',
        {},
        h(
          'div',
          { class: 'actions' },
        domain.status === 'pending' && development
          ? actionButton('Publish in the DNS stand-in', async () => {
              await publishTxt(domain.txt_name, domain.txt_value);
              await reload(`The TXT record of ${domain.domain} is published in the example's DNS stand-in. Verify it now.`);
            }, { className: 'secondary', ariaLabel: `Publish the TXT record of ${domain.domain} in the DNS stand-in` })
          : null,
        domain.status === 'pending'
          ? actionButton('Verify', async () => {
              await api('POST', `/orgs/${orgId}/domains/${domain.id}/verify`);
              await reload(`${domain.domain} is verified.`);
            }, { ariaLabel: `Verify ${domain.domain}` })
          : null,
        actionButton('Remove', async () => {
          await api('DELETE', `/orgs/${orgId}/domains/${domain.id}`);
          await reload(`${domain.domain} is removed.`);
        }, { className: 'danger', ariaLabel: `Remove ${domain.domain}` }),
        ),
      ),
    ),
  );
  return section(
    'Verified domains',
    h('p', {}, 'People at a verified domain sign in through your identity provider. Publish the TXT record a domain shows at your DNS host, then verify it.'),
    domains.length === 0
      ? h('p', {}, 'No domain yet.')
      : h('table', { 'aria-label': 'Domains' }, h('thead', {}, h('tr', {}, h('th', {}, 'Domain'), h('th', {}, 'Status'), h('th', {}, 'TXT record or verified'), h('th', {}, h('span', { class: 'visually-hidden' }, 'Actions')))), h('tbody', {}, rows)),
    form({
      name: 'Add a domain',
      submit: 'Add domain',
      fields: [field({ name: 'domain', label: 'Domain', value: suggested ?? '', hint: suggested ? `The demo provider's accounts are at ${suggested}` : 'e.g. acme.com; a public e-mail domain cannot be claimed' })],
      onSubmit: async ({ domain }) => {
        const added = await api('POST', `/orgs/${orgId}/domains`, { domain: String(domain).trim() });
        await reload(`${added.domain} is added. Publish its TXT record, then verify it.`);
      },
    }),
  );
}

function connectionSection(orgId, connection, { demo, reload }) {
  if (!connection) {
    return section(
      'Identity provider',
      h('p', {}, demo ? "The form holds the example's demo provider, which plays your company's identity provider here." : 'Register this app at your identity provider (Entra ID, Okta, Google Workspace, Keycloak), then enter what it gives you.'),
      form({
        name: 'Connect an identity provider',
        submit: 'Connect',
        fields: [
          field({ name: 'issuer', label: 'Issuer URL', type: 'url', value: demo?.issuer ?? '', hint: 'Its discovery document is fetched from here' }),
          field({ name: 'client_id', label: 'Client ID', value: demo?.client_id ?? '', autocomplete: 'off' }),
          field({ name: 'client_secret', label: 'Client secret', type: 'password', value: demo?.client_secret ?? '', autocomplete: 'off', hint: 'Stored encrypted and never shown again' }),
          checkbox('jit', 'Create an account and a membership at the first sign-in (just in time)', true),
          field({ name: 'default_role', label: 'Role for new members', value: 'member' }),
        ],
        onSubmit: async ({ issuer, client_id, client_secret, jit, default_role }) => {
          await api('POST', `/orgs/${orgId}/sso`, { issuer, client_id, client_secret, jit: jit === 'on', default_role });
          await reload('The identity provider is connected.');
        },
      }),
    );
  }
  const patch = (changes, message) => async () => {
    await api('PATCH', `/orgs/${orgId}/sso`, changes);
    await reload(message);
  };
  return section(
    'Identity provider',
    h(
      'dl',
      { class: 'details' },
      h('dt', {}, 'Status'), h('dd', {}, h('strong', {}, connection.status), connection.status === 'active' ? '' : ' (it needs a verified domain)'),
      h('dt', {}, 'Issuer'), h('dd', {}, h('code', {}, connection.issuer)),
      h('dt', {}, 'Client ID'), h('dd', {}, h('code', {}, connection.client_id)),
      h('dt', {}, 'Redirect URI to register'), h('dd', {}, h('code', {}, connection.redirect_uri)),
      h('dt', {}, 'Just-in-time members'), h('dd', {}, connection.jit ? `on, as ${connection.default_role}` : 'off'),
      h('dt', {}, 'Require single sign-on'), h('dd', {}, connection.enforce ? 'on: nobody at your domains signs in any other way' : 'off'),
    ),
    h(
      'p',
      { class: 'actions' },
      actionButton(connection.enforce ? 'Stop requiring single sign-on' : 'Require single sign-on', patch({ enforce: !connection.enforce }, connection.enforce ? 'Other sign-in methods work again.' : 'Single sign-on is now required at your domains.'), { className: 'secondary' }),
      actionButton(connection.jit ? 'Turn just-in-time members off' : 'Turn just-in-time members on', patch({ jit: !connection.jit }, 'Saved.'), { className: 'secondary' }),
      actionButton('Disconnect', async () => {
        await api('DELETE', `/orgs/${orgId}/sso`);
        await reload('The identity provider is disconnected.');
      }, { className: 'danger' }),
    ),
  );
}

export default {
  path: '/org/sso',
  title: 'Single sign-on',
  order: 78,
  nav: 'org',
  auth: true,
  async render(main, ctx) {
    const orgId = activeOrgOrHint(main, ctx);
    if (!orgId) return;
    let domains;
    try {
      ({ domains } = await api('GET', `/orgs/${orgId}/domains`));
    } catch (error) {
      // Without an `sso` config the routes answer 404.
      if (error instanceof IdentityClientError && error.status === 404) return main.append(h('p', {}, 'Single sign-on is not configured on this server (see docs/sso.md).'));
      throw error;
    }
    const connection = await connectionOf(orgId);
    const demo = ctx.development ? await devData('/dev/sso-demo.json') : null;
    const suggested = demo && !domains.some((domain) => domain.domain === demo.domain) ? demo.domain : undefined;
    const status = h('p', { role: 'status', class: 'notice', id: 'sso-status' });
    const reload = async (message) => {
      await ctx.navigate('/org/sso', { replace: true });
      if (message) document.getElementById('sso-status')?.replaceChildren(message);
    };
    main.append(
      status,
      domainsSection(orgId, domains, { development: ctx.development, suggested, reload }),
      connectionSection(orgId, connection, { demo, reload }),
      section(
        'Signing in',
        h('p', {}, 'Once a domain is verified and the provider connected, people at the domain choose "Sign in through my organization" on the ', h('a', { href: '/login' }, 'sign-in page'), ' and type their work address.'),
      ),
    );
  },
};
