window.addEventListener('load', () => { document.getElementById('count').textContent = document.images.length; });
