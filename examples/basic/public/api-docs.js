// In a file of its own rather than inline, so the page's Content-Security-Policy can refuse inline scripts.
window.SwaggerUIBundle({ url: '/openapi.yaml', dom_id: '#swagger-ui', deepLinking: false, defaultModelsExpandDepth: -1 });

// Swagger UI leaves a few controls without a name; give them one as they appear.
new MutationObserver(() => {
  for (const control of document.querySelectorAll('#swagger-ui input:not([aria-label]):not([id]), #swagger-ui select:not([aria-label])')) {
    control.setAttribute('aria-label', control.id === 'servers' ? 'Server' : control.placeholder || control.name || 'Filter');
  }
}).observe(document.getElementById('swagger-ui'), { childList: true, subtree: true });
