// In a file of its own rather than inline, so the page's Content-Security-Policy can refuse inline scripts.
window.SwaggerUIBundle({ url: '/openapi.yaml', dom_id: '#swagger-ui', deepLinking: false });
