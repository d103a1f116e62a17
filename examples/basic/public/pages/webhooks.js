// Webhooks (docs/webhooks.md): the organization's endpoints, the signing secret shown once, the
// delivery log with replay, and a test event. In development the example's own receiver
// (/dev/webhook-receiver) stands in for your endpoint, and can be told to fail to show retries.
import { api } from '../lib/identity.js';
import { activeOrgOrHint } from '../lib/org.js';
import { actionButton, field, form, formatTime, h, section } from '../lib/ui.js';

const RECEIVER = '/dev/webhook-receiver';

async function receiverState() {
  const response = await fetch(`${RECEIVER}.json`);
  return (await response.json()).data;
}

function deliveryLog(orgId, webhook, deliveries, reload) {
  if (deliveries.length === 0) return h('p', {}, 'No deliveries yet.');
  return h(
    'table',
    { 'aria-label': `Deliveries of ${webhook.url}` },
    h('thead', {}, h('tr', {}, h('th', {}, 'Event'), h('th', {}, 'Status'), h('th', {}, 'Attempts'), h('th', {}, 'Last answer'), h('th', {}, 'Next attempt'), h('th', {}, 'Delivered'), h('th', {}, h('span', { class: 'visually-hidden' }, 'Actions')))),
    h('tbody', {}, deliveries.map((delivery) => h('tr', {},
      h('td', {}, h('code', {}, delivery.event_type)),
      h('td', {}, delivery.status),
      h('td', {}, String(delivery.attempts)),
      h('td', {}, delivery.last_status === null ? (delivery.last_error ?? '—') : `${delivery.last_status}${delivery.last_error ? ` (${delivery.last_error})` : ''}`),
      h('td', {}, formatTime(delivery.next_attempt_at)),
      h('td', {}, formatTime(delivery.delivered_at)),
      h('td', {}, webhook.status === 'active'
        ? actionButton('Replay', async () => { await api('POST', `/orgs/${orgId}/webhooks/${webhook.id}/deliveries/${delivery.id}/replay`); await reload(); }, { className: 'secondary', ariaLabel: `Replay ${delivery.event_type} delivery` })
        : null),
    ))),
  );
}

export default {
  path: '/org/webhooks',
  title: 'Webhooks',
  order: 76,
  nav: 'developer',
  auth: true,
  async render(main, ctx) {
    const orgId = activeOrgOrHint(main, ctx);
    if (!orgId) return;
    const reload = () => ctx.navigate('/org/webhooks', { replace: true });
    const data = await api('GET', `/orgs/${orgId}/webhooks`);
    const logs = await Promise.all(data.webhooks.map((webhook) => api('GET', `/orgs/${orgId}/webhooks/${webhook.id}/deliveries?limit=10`)));
    const shown = h('div', { 'aria-live': 'polite' });

    const endpoints = data.webhooks.length === 0
      ? [section('Endpoints', h('p', {}, 'No webhooks yet.'))]
      : data.webhooks.map((webhook, index) => section(
          `Endpoint ${webhook.url}`,
          h('p', {}, 'Events: ', h('code', {}, webhook.events.join(', ')), ' · Status: ', h('strong', {}, webhook.status), webhook.disabled_reason ? ` (${webhook.disabled_reason})` : ''),
          h('p', { class: 'actions' },
            webhook.status === 'active'
              ? actionButton('Send test event', async () => { await api('POST', `/orgs/${orgId}/webhooks/${webhook.id}/test`); await reload(); }, { className: 'secondary' })
              : null,
            actionButton(webhook.status === 'active' ? 'Disable' : 'Enable', async () => { await api('PATCH', `/orgs/${orgId}/webhooks/${webhook.id}`, { status: webhook.status === 'active' ? 'disabled' : 'active' }); await reload(); }, { className: 'secondary' }),
            actionButton('Delete', async () => { await api('DELETE', `/orgs/${orgId}/webhooks/${webhook.id}`); await reload(); }, { className: 'danger', ariaLabel: `Delete webhook ${webhook.url}` }),
          ),
          h('h3', {}, 'Delivery log'),
          actionButton('Refresh', reload, { className: 'secondary', ariaLabel: `Refresh the delivery log of ${webhook.url}` }),
          deliveryLog(orgId, webhook, logs[index].deliveries, reload),
        ));

    const receiver = ctx.development ? await receiverState() : undefined;
    const receiverSection = receiver
      ? section(
          'Example receiver',
          h('p', {}, `This app receives webhooks at ${location.origin}${RECEIVER} and currently answers `, h('strong', {}, String(receiver.answer_with)), '.'),
          actionButton(receiver.answer_with === 204 ? 'Make the receiver fail (500)' : 'Make the receiver succeed (204)', async () => {
            await fetch(`${RECEIVER}/answer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ status: receiver.answer_with === 204 ? 500 : 204 }) });
            await reload();
          }, { className: 'secondary' }),
          receiver.received.length === 0
            ? h('p', {}, 'Nothing received yet.')
            : h('table', { 'aria-label': 'Received by the example receiver' },
                h('thead', {}, h('tr', {}, h('th', {}, 'Received'), h('th', {}, 'Event'), h('th', {}, 'webhook-id'), h('th', {}, 'Answered'))),
                h('tbody', {}, receiver.received.map((entry) => h('tr', {}, h('td', {}, formatTime(entry.received_at)), h('td', {}, h('code', {}, entry.type)), h('td', {}, h('code', {}, entry.webhook_id)), h('td', {}, String(entry.answered)))))),
        )
      : null;

    main.append(
      shown,
      ...endpoints,
      section(
        'Add an endpoint',
        h('p', {}, 'Deliveries are signed per Standard Webhooks; verify them with the ', h('code', {}, 'standardwebhooks'), ' package (see docs/webhooks.md).'),
        form({
          submit: 'Add endpoint',
          fields: [
            field({ name: 'url', label: 'Endpoint URL', type: 'url', value: ctx.development ? `${location.origin}${RECEIVER}` : '', hint: 'https:, on a public address' }),
            field({ name: 'events', label: 'Events', value: '*', hint: 'Event types separated by commas, or * for all' }),
          ],
          onSubmit: async ({ url, events }) => {
            const list = String(events).split(',').map((type) => type.trim()).filter(Boolean);
            const created = await api('POST', `/orgs/${orgId}/webhooks`, { url, events: list });
            await reload();
            // The secret is in this answer only: the server keeps it encrypted and never shows it again.
            document.querySelector('#main [aria-live]')?.replaceChildren(
              section(
                'Signing secret',
                h('p', { role: 'status' }, 'Copy this secret into your receiver now. It will not be shown again.'),
                h('p', {}, h('code', { class: 'webhook-secret' }, created.secret)),
              ),
            );
          },
        }),
      ),
      ...(receiverSection ? [receiverSection] : []),
    );
  },
};
